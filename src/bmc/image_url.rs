//! What of an image URL handed to a BMC (virtual media, firmware) may be
//! shown in logs, errors and reports. Such a URL may carry a secret: a token
//! in its path (`/vmedia/<token>/boot.iso`), in its query, or credentials
//! in its authority. Only `scheme://host:port` and the last path segment
//! (the file name the BMC shows as `ImageName`) are ever shown.
//!
//! Pure text; no I/O.

/// `scheme://host:port/.../file` for a URL; `<unparsable URL>` for text that
/// is not one (it is not echoed: it might be all secret).
pub fn redact(image_url: &str) -> String {
    let Ok(u) = url::Url::parse(image_url) else {
        return "<unparsable URL>".to_string();
    };
    let host = match u.host_str() {
        Some(h) => match u.port_or_known_default() {
            Some(p) => format!("{h}:{p}"),
            None => h.to_string(),
        },
        None => String::new(),
    };
    let last = u
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or_default();
    let hidden = u.path().trim_matches('/') != last || u.query().is_some();
    let elided = if hidden { ".../" } else { "" };
    format!("{}://{host}/{elided}{last}", u.scheme())
}

/// `text` (a BMC's error message, which may quote the URL it failed to
/// fetch, whole or only its path) with every copy of `image_url`, its path
/// and query, and its query alone replaced by [`redact`]'s form.
pub fn scrub(text: &str, image_url: &str) -> String {
    let shown = redact(image_url);
    let mut out = text.replace(image_url, &shown);
    if let Ok(u) = url::Url::parse(image_url) {
        let path_and_query = match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_string(),
        };
        if u.query().is_some() {
            out = out.replace(&path_and_query, "/...");
        }
        // A path of more than the file name may hold a token.
        if u.path().trim_matches('/').contains('/') {
            out = out.replace(u.path(), "/...");
        }
        if let Some(q) = u.query().filter(|q| !q.is_empty()) {
            out = out.replace(q, "...");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scheme_host_port_and_the_file_name_are_shown() {
        let url = "http://10.89.0.1:8080/vmedia/3f9a1c0ddeadbeef/boot.iso?token=s3cret";
        let shown = redact(url);
        assert_eq!(shown, "http://10.89.0.1:8080/.../boot.iso");
        assert!(!shown.contains("3f9a1c") && !shown.contains("s3cret"));
        // The default port is named, credentials never are.
        assert_eq!(
            redact("https://user:pw@images.example/a/b/live.iso"),
            "https://images.example:443/.../live.iso"
        );
        // Nothing hidden: nothing elided.
        assert_eq!(
            redact("http://10.0.0.1:8080/boot.iso"),
            "http://10.0.0.1:8080/boot.iso"
        );
        assert_eq!(
            redact("http://10.0.0.1:8080/boot.iso?t=x"),
            "http://10.0.0.1:8080/.../boot.iso"
        );
        assert_eq!(redact("not a url /secret"), "<unparsable URL>");
    }

    #[test]
    fn error_texts_lose_the_url_its_path_and_its_query() {
        let url = "http://10.89.0.1:8080/vmedia/tok123/boot.iso?k=q456";
        let whole = format!("Failed fetching image from URL {url}: refused");
        assert_eq!(
            scrub(&whole, url),
            "Failed fetching image from URL http://10.89.0.1:8080/.../boot.iso: refused"
        );
        // What Python's requests says: the path and query without the host.
        let requests = "HTTPConnectionPool(host='10.89.0.1', port=8080): Max retries exceeded with url: /vmedia/tok123/boot.iso?k=q456";
        let s = scrub(requests, url);
        assert!(!s.contains("tok123") && !s.contains("q456"), "{s}");
        assert!(scrub("query was k=q456", url).contains("..."));
        let path_only = scrub("GET /vmedia/tok123/boot.iso: 404", url);
        assert_eq!(path_only, "GET /...: 404");
        assert_eq!(scrub("nothing to hide", url), "nothing to hide");
    }
}
