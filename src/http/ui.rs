//! The web page: one static HTML page (templates/ui/index.html) that reads
//! the API with the user's token and shows every MachineSet's rollout
//! (state, counts, revisions, each batch's machines) and every Machine's phase, power,
//! node, last error and boot timeline. It holds no data of its own and is
//! served without authentication; the API calls it makes carry the token.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX: &str = include_str!("../../templates/ui/index.html");

async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            // The page only talks to its own origin.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            ),
        ],
        INDEX,
    )
}

/// Routes of the web page: `/` and `/ui`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/ui", get(index))
}
