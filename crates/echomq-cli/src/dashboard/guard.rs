//! Who may see the dashboard, and which POSTs it takes: the authentication every request passes
//! (a bearer token, or HTTP basic), and the CSRF token every action returns.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::{layout, App};

/// The cookie a browser keeps the bearer token in, once it opened `/?token=T`.
const TOKEN_COOKIE: &str = "emq_dashboard_token";

/// How requests prove who they are.
pub(crate) enum Auth {
    /// Nothing asked (a loopback bind).
    Open,
    /// `Authorization: Bearer T`, or the cookie `/?token=T` set.
    Token(String),
    /// HTTP basic: the whole expected `Authorization` value.
    Basic(String),
}

impl Auth {
    /// From the command's options: a token, or a user and password (not both).
    pub(crate) fn from_args(token: Option<&str>, user: Option<&str>, password: Option<&str>) -> anyhow::Result<Self> {
        match (token, user, password) {
            (Some(_), Some(_), _) => anyhow::bail!("give --auth-token or --auth-user/--auth-password, not both"),
            (Some(t), ..)
                if t.is_empty() || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~+/=-".contains(&b)) =>
            {
                // it travels in a header, a cookie and a query string as it is
                anyhow::bail!("--auth-token must be non-empty and only A-Z a-z 0-9 . _ ~ + / = -")
            }
            (Some(t), ..) => Ok(Auth::Token(t.to_string())),
            (None, Some(u), Some(p)) => {
                if u.is_empty() || u.contains(':') || p.is_empty() {
                    anyhow::bail!("--auth-user must be non-empty without ':', and --auth-password non-empty");
                }
                Ok(Auth::Basic(format!(
                    "Basic {}",
                    crate::job::base64(format!("{u}:{p}").as_bytes())
                )))
            }
            _ => Ok(Auth::Open),
        }
    }

    /// Whether requests must authenticate.
    pub(crate) fn is_set(&self) -> bool {
        !matches!(self, Auth::Open)
    }
}

/// The middleware: a request that does not authenticate gets 401 (with the basic challenge
/// when basic is asked); a browser's `?token=T` on a GET is kept in a cookie and the page
/// reloaded without it, so the token does not stay in the address bar or the history. Without
/// authentication (a loopback bind) only a loopback `Host` is served: a site whose name was
/// rebound to 127.0.0.1 cannot read the pages or their CSRF token. No page may be framed by
/// another site (clickjacking).
pub(crate) async fn check(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let mut r = authenticated(&app, req, next).await;
    let h = r.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    r
}

/// Whether a `Host` header names this machine's loopback (`localhost`, `127.0.0.1`, `[::1]`, any
/// port).
fn loopback_host(host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

async fn authenticated(app: &App, req: Request, next: Next) -> Response {
    match &app.auth {
        Auth::Open => {
            if !loopback_host(header_value(req.headers(), header::HOST)) {
                return layout::error_page(
                    StatusCode::FORBIDDEN,
                    "this dashboard serves loopback names only (localhost, 127.0.0.1, [::1])",
                );
            }
            next.run(req).await
        }
        Auth::Token(t) => {
            let headers = req.headers();
            let bearer = header_value(headers, header::AUTHORIZATION)
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|v| same(v, t));
            let cookie = cookie(headers, TOKEN_COOKIE).is_some_and(|v| same(&v, t));
            if bearer || cookie {
                return next.run(req).await;
            }
            let given = req
                .uri()
                .query()
                .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")));
            if req.method() == axum::http::Method::GET && given.is_some_and(|g| same(g, t)) {
                // the same page without the token: a path of this site only (never `//host`)
                let path = req.uri().path();
                let path = if path.starts_with("//") { "/" } else { path };
                let rest: Vec<&str> = req
                    .uri()
                    .query()
                    .unwrap_or("")
                    .split('&')
                    .filter(|kv| !kv.is_empty() && !kv.starts_with("token="))
                    .collect();
                let to = if rest.is_empty() {
                    path.to_string()
                } else {
                    format!("{path}?{}", rest.join("&"))
                };
                let mut r = Redirect::to(&to).into_response();
                // Lax: a link to a page, followed from elsewhere, still carries it (every action
                // is a POST, and needs the page's CSRF token besides)
                let value = format!("{TOKEN_COOKIE}={t}; HttpOnly; SameSite=Lax; Path=/");
                if let Ok(v) = HeaderValue::from_str(&value) {
                    r.headers_mut().insert(header::SET_COOKIE, v);
                }
                return r;
            }
            let mut r = layout::error_page(
                StatusCode::UNAUTHORIZED,
                "a token is needed: open /?token=… or send Authorization: Bearer …",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"emq dashboard\""),
            );
            r
        }
        Auth::Basic(expected) => {
            let given = header_value(req.headers(), header::AUTHORIZATION);
            if given.is_some_and(|g| same(g, expected)) {
                return next.run(req).await;
            }
            let mut r = layout::error_page(StatusCode::UNAUTHORIZED, "sign in to see the dashboard");
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"emq dashboard\", charset=\"UTF-8\""),
            );
            r
        }
    }
}

/// The CSRF check of an action: its form's token is this process's.
pub(crate) fn csrf_ok(app: &App, given: Option<&str>) -> bool {
    given.is_some_and(|g| same(g, &app.csrf))
}

fn header_value(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(name)?.strip_prefix('=').map(str::to_string))
}

/// Equal, in a time that does not depend on where two strings of one length first differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bytes from the operating system, as hex.
pub(crate) fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for the CSRF token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_encode_as_browsers_send_them() {
        assert_eq!(
            crate::job::base64(b"Aladdin:open sesame"),
            "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
        for ok in ["127.0.0.1:7070", "localhost:1", "LOCALHOST", "[::1]:80", "127.1.2.3"] {
            assert!(loopback_host(Some(ok)), "{ok}");
        }
        for bad in ["evil.example:7070", "10.0.0.1", "[::2]:80", "localhost.evil.example"] {
            assert!(!loopback_host(Some(bad)), "{bad}");
        }
        assert!(!loopback_host(None));
    }

    #[test]
    fn the_options_give_one_way_to_authenticate() {
        assert!(!Auth::from_args(None, None, None).unwrap().is_set());
        assert!(Auth::from_args(Some("t"), None, None).unwrap().is_set());
        assert!(Auth::from_args(Some(""), None, None).is_err());
        assert!(Auth::from_args(Some("a b"), None, None).is_err());
        assert!(Auth::from_args(Some("t"), Some("u"), Some("p")).is_err());
        assert!(Auth::from_args(None, Some("u:x"), Some("p")).is_err());
        assert!(matches!(
            Auth::from_args(None, Some("u"), Some("p")).unwrap(),
            Auth::Basic(v) if v == "Basic dTpw"
        ));
    }
}
