//! The store's URL: `redis://` or `rediss://` (TLS) for one server, `redis+cluster://` or
//! `rediss+cluster://` for a Redis Cluster's seed nodes (`host:port[,host:port…]`, credentials
//! given once for all), and the store's own query parameters, `wait=N` and `wait_timeout=MS`
//! ([`super::RedisStore::wait_replicas`]), taken out before the rest goes to the client.

use std::time::Duration;

use super::{WaitReplicas, WAIT_TIMEOUT_DEFAULT, WAIT_TIMEOUT_MAX};

/// What a URL names.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// One `redis://` (or `rediss://`) URL per server named, each with the URL's credentials, path
    /// and client parameters.
    pub(super) seeds: Vec<String>,
    /// The URL asked for a cluster.
    pub(super) cluster: bool,
    pub(super) tls: bool,
    pub(super) wait: Option<WaitReplicas>,
}

/// Reads `url`; the error is the reason it is refused.
pub(super) fn parse(url: &str) -> Result<Target, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("not a URL: expected redis://, rediss://, redis+cluster:// or rediss+cluster://")?;
    let (base, cluster) = match scheme {
        // a Unix socket: one server, the URL the client's own
        "unix" | "redis+unix" => {
            return Ok(Target {
                seeds: vec![url.to_string()],
                cluster: false,
                tls: false,
                wait: None,
            })
        }
        "redis" | "rediss" => (scheme, false),
        "redis+cluster" => ("redis", true),
        "rediss+cluster" => ("rediss", true),
        other => return Err(format!("unknown scheme {other}://")),
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (creds, hosts) = match authority.rsplit_once('@') {
        Some((creds, hosts)) => (Some(creds), hosts),
        None => (None, authority),
    };
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let mut kept = Vec::new();
    let mut replicas = None;
    let mut timeout = None;
    for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("wait", _)) if replicas.is_some() => return Err("wait given twice".into()),
            Some(("wait_timeout", _)) if timeout.is_some() => return Err("wait_timeout given twice".into()),
            Some(("wait", n)) => {
                replicas = Some(
                    n.parse::<u32>()
                        .map_err(|_| format!("wait={n}: expected a number of replicas"))?,
                )
            }
            Some(("wait_timeout", ms)) => {
                timeout = Some(Duration::from_millis(
                    ms.parse::<u64>()
                        .ok()
                        .filter(|ms| *ms > 0 && *ms <= WAIT_TIMEOUT_MAX.as_millis() as u64)
                        .ok_or_else(|| {
                            format!(
                                "wait_timeout={ms}: expected milliseconds from 1 to {}",
                                WAIT_TIMEOUT_MAX.as_millis()
                            )
                        })?,
                ))
            }
            _ => kept.push(pair),
        }
    }
    if timeout.is_some() && replicas.is_none() {
        return Err("wait_timeout without wait=N".into());
    }
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.iter().any(|h| h.is_empty()) {
        return Err("an empty host".into());
    }
    if hosts.len() > 1 && !cluster {
        return Err(format!(
            "several hosts name a cluster's seed nodes: write {base}+cluster://{}",
            hosts.join(",")
        ));
    }
    if cluster && !matches!(path.trim_start_matches('/'), "" | "0") {
        return Err(format!("a cluster has only database 0, not {path}"));
    }
    let creds = creds.map(|c| format!("{c}@")).unwrap_or_default();
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    Ok(Target {
        seeds: hosts
            .iter()
            .map(|h| format!("{base}://{creds}{h}{path}{query}"))
            .collect(),
        cluster,
        tls: base == "rediss",
        wait: replicas.filter(|n| *n > 0).map(|replicas| WaitReplicas {
            replicas,
            timeout: timeout.unwrap_or(WAIT_TIMEOUT_DEFAULT),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_url_names_each_seed_with_the_credentials() {
        let t = parse("redis+cluster://u:p@h1:7000,h2:7001").unwrap();
        assert_eq!(t.seeds, vec!["redis://u:p@h1:7000", "redis://u:p@h2:7001"]);
        assert!(t.cluster && !t.tls && t.wait.is_none());
        let t = parse("rediss+cluster://h1:7000/?wait=1&protocol=resp3").unwrap();
        assert_eq!(t.seeds, vec!["rediss://h1:7000/?protocol=resp3"]);
        assert!(t.cluster && t.tls);
        assert_eq!(
            t.wait,
            Some(WaitReplicas {
                replicas: 1,
                timeout: WAIT_TIMEOUT_DEFAULT
            })
        );
    }

    #[test]
    fn a_plain_url_passes_through_without_the_stores_parameters() {
        let t = parse("redis://:pw@h:6379/2?wait=2&wait_timeout=250").unwrap();
        assert_eq!(t.seeds, vec!["redis://:pw@h:6379/2"]);
        assert!(!t.cluster);
        assert_eq!(
            t.wait,
            Some(WaitReplicas {
                replicas: 2,
                timeout: Duration::from_millis(250)
            })
        );
        assert_eq!(parse("redis://h:6379?wait=0").unwrap().wait, None);
        let unix = parse("redis+unix:///run/redis.sock?db=1").unwrap();
        assert_eq!(unix.seeds, vec!["redis+unix:///run/redis.sock?db=1"]);
    }

    #[test]
    fn a_bad_url_is_refused_with_its_reason() {
        for (url, reason) in [
            ("redis://a:1,b:2", "redis+cluster://a:1,b:2"),
            ("redis+cluster://a:1,,b:2", "empty host"),
            ("redis+cluster://a:1/3", "only database 0"),
            ("redis://h?wait=x", "wait=x"),
            ("redis://h?wait=1&wait_timeout=0", "wait_timeout=0"),
            ("redis://h?wait_timeout=5", "without wait"),
            ("redis://h?wait_timeout=6000&wait=1", "from 1 to 5000"),
            ("redis://h?wait=2&wait=1", "wait given twice"),
            ("memcached://h", "unknown scheme"),
        ] {
            let err = parse(url).unwrap_err();
            assert!(err.contains(reason), "{url}: {err}");
        }
    }
}
