//! The usage dashboard (`GET /dashboard`): a static page whose JavaScript asks the admin API
//! (with the admin token the operator types, kept in the tab's `sessionStorage`) and draws
//! its answers. The page, its script and the charting library (uPlot, MIT, vendored in
//! `assets/`) are built into the binary: nothing is fetched from elsewhere at run time.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Path;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::routing::get;
use axum::Router;

use super::dashboard_api;
use super::proxy::App;

/// Each asset: its name under `/dashboard/assets/`, content type and bytes.
const ASSETS: [(&str, &str, &str); 5] = [
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/dashboard.js"),
    ),
    (
        "dashboard.css",
        "text/css; charset=utf-8",
        include_str!("assets/dashboard.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_str!("assets/uPlot.min.css"),
    ),
    (
        "uPlot.LICENSE",
        "text/plain; charset=utf-8",
        include_str!("assets/uPlot.LICENSE"),
    ),
];

const PAGE: &str = include_str!("assets/index.html");

/// Only this origin's scripts, styles and requests; no framing; no referrer (so a token in
/// the address never leaves in one).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'self'";

fn answer(content_type: &'static str, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn page() -> Response<Body> {
    answer("text/html; charset=utf-8", PAGE)
}

async fn asset(Path(name): Path<String>) -> Response<Body> {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some(&(_, content_type, body)) => answer(content_type, body),
        None => {
            let mut response = answer("text/plain; charset=utf-8", "not found");
            *response.status_mut() = StatusCode::NOT_FOUND;
            response
        }
    }
}

/// The dashboard's page and assets, and the admin JSON it draws.
pub(crate) fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/dashboard", get(page))
        .route("/dashboard/", get(page))
        .route("/dashboard/assets/{name}", get(asset))
        .route("/admin/usage/series", get(dashboard_api::series))
        .route("/admin/dashboard/counters", get(dashboard_api::counters))
        .route("/admin/refusals", get(dashboard_api::refusals))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_vendored_assets() {
        for (name, _, body) in ASSETS {
            assert!(!body.is_empty(), "{name}");
        }
        let targets = PAGE
            .split("src=\"")
            .skip(1)
            .chain(PAGE.split("href=\"").skip(1));
        for target in targets.map(|t| t.split('"').next().unwrap_or_default()) {
            if target.starts_with('#') || target.starts_with("data:") {
                continue;
            }
            let name = target.strip_prefix("/dashboard/assets/").unwrap_or(target);
            assert!(
                ASSETS.iter().any(|(n, _, _)| *n == name),
                "{target} is not a vendored asset"
            );
        }
    }
}
