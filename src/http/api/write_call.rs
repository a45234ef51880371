//! What every write handler (PUT and PATCH of an object, its status or its
//! scale, and of a Namespace) takes from its request, in one extractor: the
//! write's options from the query (field manager, force, dry run), the
//! state it writes through (the dry-run store for `?dryRun=All`), the
//! headers and the body. The handlers differ only in how they name their
//! target.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use super::writes::{WriteQuery, Writer};

pub struct WriteCall {
    /// The state to write through ([`Writer::state`]).
    pub(super) st: ApiState,
    pub(super) w: Writer,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

impl FromRequest<ApiState> for WriteCall {
    type Rejection = Response;

    async fn from_request(req: Request, state: &ApiState) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let q = Query::<WriteQuery>::from_request_parts(&mut parts, state).await;
        let headers = parts.headers.clone();
        let w = Writer::new(q, &headers).map_err(IntoResponse::into_response)?;
        // The body through axum's own extractor, so the body limit holds.
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(WriteCall {
            st: w.state(state.clone()),
            w,
            headers,
            body,
        })
    }
}
