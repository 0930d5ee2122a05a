//! `rediss://`: the store and a consumer over TLS, against a `redis-server` of this test's own
//! serving a certificate from a CA made here with `openssl`; and a server whose certificate no
//! trusted CA signed is refused with a typed error, by an open and by a consumer alike. A binary
//! of its own: the trusted roots come from `SSL_CERT_FILE`, which this process sets
//! (rustls-native-certs reads it at each connect).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use echomq::store::redis::RedisStore;
use echomq::store::{SettleOptions, Settled, Store};
use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, QueueName, Verdict};
use redis_server::OwnedServer;

/// Runs `openssl` with `args` in `dir`; panics with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("openssl is needed for the TLS test (Debian: apt-get install openssl): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA named `name` in `dir`: `<name>.crt` and `<name>.key` (P-256, valid two days).
fn make_ca(dir: &Path, name: &str) {
    let (crt, key, subject) = (format!("{name}.crt"), format!("{name}.key"), format!("/CN={name}"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &subject,
            "-keyout",
            &key,
            "-out",
            &crt,
        ],
    );
}

/// `server.crt` / `server.key` in `dir`: a certificate for the address 127.0.0.1 signed by CA `ca`.
fn make_server_cert(dir: &Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_and_a_consumer_work_over_tls_and_an_untrusted_server_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_ca(dir.path(), "emq-test-ca");
    make_ca(dir.path(), "other-ca");
    make_server_cert(dir.path(), "emq-test-ca");
    let file = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let tls_port = redis_server::free_port().to_string();
    let (crt, key, ca) = (file("server.crt"), file("server.key"), file("emq-test-ca.crt"));
    let server = OwnedServer::start(&[
        "--appendonly",
        "no",
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &crt,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}");

    // trusting only another CA: the handshake fails, and the open says so in a typed error — a
    // refusal (waiting would not mend it), not an outage
    std::env::set_var("SSL_CERT_FILE", file("other-ca.crt"));
    let refused = RedisStore::open(&url).await;
    let err = refused.expect_err("a server no trusted CA vouches for is refused");
    assert!(!err.is_unreachable(), "a refusal, not an outage: {err:?}");
    assert!(err.is_misconfigured(), "a typed error: {err:?}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "it names the cause: {err}"
    );
    // a consumer on a store that connects at its first verb ends on it too, at its first round
    let lazy: Arc<dyn Store> = Arc::from(echomq::store::open_lazy(&url).await.unwrap());
    let refused_consumer = Consumer::start(
        lazy,
        QueueName::new("tls-refused").unwrap(),
        |_j: JobContext| async { Verdict::Done },
        ConsumerOptions::default().with_beat(Duration::from_millis(200)),
    )
    .unwrap();
    let ended = refused_consumer
        .wait_for(Duration::from_secs(20))
        .await
        .expect_err("the consumer ends on the refused certificate");
    assert!(
        ended.is_misconfigured() && ended.to_string().contains("certificate"),
        "{ended:?}"
    );

    // trusting the server's CA: every verb over TLS
    std::env::set_var("SSL_CERT_FILE", &ca);
    let store = Arc::new(RedisStore::open(&url).await.expect("the TLS server, its CA trusted"));
    let q = QueueName::new("tls").unwrap();
    let ids = store.enqueue(&q, &[NewJob::new("a"), NewJob::new("b")]).await.unwrap();
    assert_eq!(ids.len(), 2);
    let claimed = store
        .claim(
            &q,
            echomq::store::ClaimRequest::new(1, Duration::from_secs(30)).max_attempts(3),
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].payload, b"a");
    let settled = store
        .complete(
            &q,
            &echomq::store::Completion::new(claimed[0].id.clone(), claimed[0].attempts),
            SettleOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(settled, Settled::Ok);

    // a consumer: its own parking connection over TLS too; woken by an enqueue, it runs both jobs
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let tx = tx.clone();
            async move {
                tx.send(job.payload().to_vec()).unwrap();
                Verdict::Done
            }
        },
        ConsumerOptions::default(),
    )
    .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, b"b", "the job left waiting");
    store.enqueue(&q, &[NewJob::new("c")]).await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(woken, b"c", "the parked consumer was woken over its TLS connection");
    consumer.stop(Duration::from_secs(5)).await.unwrap();
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active, counts.completed), (0, 0, 3));
    drop(server);
}
