//! The upstreams the bench calls: its own (axum on one thread, plain or SSE) and, when
//! installed, nginx answering the same canned completion (plain only), as the issue-36
//! measurements used.

use std::convert::Infallible;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, Response};
use axum::routing::post;
use axum::Router;

pub const PLAIN: &str = r#"{"id":"chatcmpl-load","object":"chat.completion","created":0,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":" hello hello hello hello hello"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}"#;
const CHUNK: &str = r#"{"id":"chatcmpl-load","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" hello"},"logprobs":null,"finish_reason":null}]}"#;
const LAST: &str = r#"{"id":"chatcmpl-load","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}"#;
const USAGE: &str = r#"{"id":"chatcmpl-load","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}"#;

/// The fake upstream's answer: the canned completion, or its stream (five content chunks,
/// the finish, the usage chunk when asked for, `[DONE]`), each event its own write.
async fn answer(body: Bytes) -> Response<Body> {
    let text = std::str::from_utf8(&body).unwrap_or("");
    let stream = text.contains(r#""stream":true"#);
    if !stream {
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(PLAIN))
            .expect("a valid response");
    }
    let mut events: Vec<String> = (0..5).map(|_| format!("data: {CHUNK}\n\n")).collect();
    events.push(format!("data: {LAST}\n\n"));
    if text.contains(r#""include_usage":true"#) {
        events.push(format!("data: {USAGE}\n\n"));
    }
    events.push("data: [DONE]\n\n".to_string());
    let pieces = futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(pieces))
        .expect("a valid response")
}

/// Starts the bench's own upstream on its own thread (`bench-upstream`) and runtime; its
/// base URL.
pub fn start_rust() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.set_nonblocking(true).expect("non-blocking");
    let address = listener.local_addr().expect("an address");
    let body = move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("bench-upstream-io")
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
            let app = Router::new().route("/v1/chat/completions", post(answer));
            axum::serve(listener, app)
                .await
                .expect("the upstream serves");
        });
    };
    std::thread::Builder::new()
        .name("bench-upstream".into())
        .spawn(body)
        .expect("the upstream's thread starts");
    format!("http://{address}")
}

/// nginx (one worker) answering `PLAIN` to every POST, stopped when dropped.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    pub url: String,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: on SIGTERM nginx's master stops its worker; a killed master
        // leaves the worker running, still listening on the port.
        let pid = self.child.id().to_string();
        let terminated = Command::new("kill").args(["-TERM", &pid]).status();
        if !terminated.is_ok_and(|s| s.success()) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts nginx when it is installed (`/usr/sbin/nginx` or on the PATH); `None` otherwise.
pub fn start_nginx() -> Option<Nginx> {
    let binary = ["/usr/sbin/nginx", "nginx"].into_iter().find(|b| {
        Command::new(b)
            .arg("-v")
            .stderr(Stdio::null())
            .status()
            .is_ok()
    })?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let dir = std::env::temp_dir().join(format!("gateway-load-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let d = dir.display();
    let conf = format!(
        "worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
         events {{ worker_connections 4096; }}\n\
         http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         keepalive_requests 1000000;\n\
         server {{ listen 127.0.0.1:{port}; location / {{ default_type application/json;\n\
         return 200 '{PLAIN}'; }} }} }}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).ok()?;
    let child = Command::new(binary)
        .args(["-p", &dir.display().to_string(), "-c"])
        .arg(dir.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let nginx = Nginx {
        child,
        dir,
        url: format!("http://127.0.0.1:{port}"),
    };
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(nginx);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
