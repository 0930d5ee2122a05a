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
        Reply::Error(e) => return Err(redis::RedisError::from((redis::ErrorKind::Extension, "engine", e))),
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
                    let reply = e
                        .raw(words)
                        .await
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
