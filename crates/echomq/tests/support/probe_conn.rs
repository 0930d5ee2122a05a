//! A connection a keyspace probe reads through: a Redis server's, or the embedded store's raw
//! commands answering as Redis's — one probe of the keyspace for both engines.

use redis::aio::MultiplexedConnection;

/// What a probe reads through: a Redis server's connection, or the embedded engine's raw entry
/// (its commands answering as Redis's): one probe of the keyspace for both engines.
#[derive(Clone)]
pub enum ProbeConn {
    Redis(MultiplexedConnection),
    Engine(echomq::store::embedded::EmbeddedStore),
}

/// An engine reply as the Redis client's value.
fn engine_value(r: echomq::store::embedded::engine::Reply) -> redis::RedisResult<redis::Value> {
    use echomq::store::embedded::engine::Reply;
    Ok(match r {
        Reply::Nil => redis::Value::Nil,
        Reply::Int(i) => redis::Value::Int(i),
        Reply::Bulk(b) => redis::Value::BulkString(b),
        Reply::Status(s) if s == "OK" => redis::Value::Okay,
        Reply::Status(s) => redis::Value::SimpleString(s),
        // as Redis's client reads a server's error: its first word the code
        Reply::Error(e) => {
            let (code, detail) = e.split_once(' ').unwrap_or((&e, ""));
            return Err(redis::make_extension_error(
                code.to_string(),
                (!detail.is_empty()).then(|| detail.to_string()),
            ));
        }
        Reply::Array(items) => redis::Value::Array(items.into_iter().map(engine_value).collect::<Result<_, _>>()?),
    })
}

impl redis::aio::ConnectionLike for ProbeConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            ProbeConn::Redis(c) => c.req_packed_command(cmd),
            ProbeConn::Engine(e) => {
                let words: Vec<Vec<u8>> = cmd
                    .args_iter()
                    .filter_map(|a| match a {
                        redis::Arg::Simple(b) => Some(b.to_vec()),
                        _ => None,
                    })
                    .collect();
                let e = e.clone();
                Box::pin(async move {
                    // EVAL body numkeys key… arg…: the script's text run on the engine
                    let eval = words.first().is_some_and(|w| w.eq_ignore_ascii_case(b"EVAL"));
                    let reply = if eval && words.len() >= 3 {
                        let n: usize = String::from_utf8_lossy(&words[2]).parse().unwrap_or(0);
                        let mut rest = words[3..].to_vec();
                        let args = rest.split_off(n.min(rest.len()));
                        e.eval(words[1].clone(), rest, args).await
                    } else {
                        e.raw(words).await
                    };
                    let reply = reply
                        .map_err(|err| redis::RedisError::from((redis::ErrorKind::Io, "engine", err.to_string())))?;
                    engine_value(reply)
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            ProbeConn::Redis(c) => c.req_packed_commands(pipeline, offset, count),
            ProbeConn::Engine(_) => Box::pin(async {
                Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the engine probe sends no pipelines",
                )))
            }),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}
