//! A PostgreSQL server for a test: started in a temp directory with `initdb` + `pg_ctl` on a
//! free port (as the `postgres` user when the tests run as root), or the machine's server on
//! 127.0.0.1:5432 (trust auth, database `test`) when no `initdb` is found. Each server gives
//! a fresh database.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A running server; stopped (and its directory removed) on drop when this test started it.
pub struct Pg {
    dir: Option<PathBuf>,
    port: u16,
    as_postgres: bool,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn find(tool: &str) -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/bin")];
    // Debian keeps the server tools in /usr/lib/postgresql/<version>/bin, newest first.
    if let Ok(versions) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut found: Vec<PathBuf> = versions.flatten().map(|v| v.path().join("bin")).collect();
        found.sort();
        dirs.extend(found.into_iter().rev());
    }
    dirs.push(PathBuf::from("/usr/bin"));
    dirs.into_iter().map(|d| d.join(tool)).find(|p| p.exists())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn run(as_postgres: bool, program: &PathBuf, args: &[&str]) -> bool {
    let mut cmd = if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Pg {
    /// Starts a server (or finds the machine's); `None` when neither works.
    pub fn start() -> Option<Pg> {
        if let (Some(initdb), Some(pg_ctl)) = (find("initdb"), find("pg_ctl")) {
            let as_postgres = is_root();
            let dir = std::env::temp_dir().join(format!(
                "ug-pg-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&dir).ok()?;
            if as_postgres {
                Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(&dir)
                    .status()
                    .ok()?;
            }
            let data = dir.join("data");
            let data_s = data.to_str()?.to_string();
            let dir_s = dir.to_str()?.to_string();
            let port = free_port();
            let ok = run(
                as_postgres,
                &initdb,
                &["-D", &data_s, "-A", "trust", "-U", "postgres"],
            ) && run(
                as_postgres,
                &pg_ctl,
                &[
                    "-D",
                    &data_s,
                    "-w",
                    "-l",
                    &format!("{dir_s}/log"),
                    "-o",
                    &format!("-p {port} -k {dir_s} -c listen_addresses=127.0.0.1 -c fsync=off"),
                    "start",
                ],
            );
            if ok {
                eprintln!("postgres: started in {dir_s} on port {port}");
                return Some(Pg {
                    dir: Some(dir),
                    port,
                    as_postgres,
                });
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        let machine = std::net::TcpStream::connect("127.0.0.1:5432").is_ok();
        eprintln!("postgres: using the machine's server on 127.0.0.1:5432: {machine}");
        machine.then_some(Pg {
            dir: None,
            port: 5432,
            as_postgres: false,
        })
    }

    /// A URL to a fresh, empty database on the server.
    pub fn fresh_url(&self) -> String {
        let (user, admin_db) = if self.dir.is_some() {
            ("postgres", "postgres")
        } else {
            ("postgres", "test")
        };
        let db = format!(
            "ug_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let admin = format!("postgres://{user}@127.0.0.1:{}/{admin_db}", self.port);
        let mut client = postgres::Client::connect(&admin, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot reach {admin}: {e}"));
        client
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .unwrap();
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }

    /// Whether this is the machine's server (not started by the test).
    pub fn is_machine_server(&self) -> bool {
        self.dir.is_none()
    }

    /// Stops the server (tests of a ledger that cannot be reached).
    pub fn stop(&self) {
        if let Some(dir) = &self.dir {
            let data = dir.join("data");
            run(
                self.as_postgres,
                &find("pg_ctl").unwrap(),
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            );
        }
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
