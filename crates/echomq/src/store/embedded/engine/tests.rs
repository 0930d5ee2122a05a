use super::*;

#[test]
fn doubles_are_written_as_redis_writes_them() {
    assert_eq!(format_double(20.0), "20");
    assert_eq!(format_double(1_733_000_000_123_456.0), "1733000000123456");
    assert_eq!(format_double(-3.0), "-3");
    assert_eq!(format_double(0.1), "0.10000000000000001");
    assert_eq!(format_double(2.5), "2.5");
    assert_eq!(format_double(1e20), "1e+20");
    assert_eq!(format_double(1.5e-7), "1.4999999999999999e-07");
    assert_eq!(format_double(f64::INFINITY), "inf");
    assert_eq!(format_double(f64::NEG_INFINITY), "-inf");
}

fn engine() -> LuaHost {
    let conn = Connection::open_in_memory().unwrap();
    let mut e = LuaHost::new(conn).unwrap();
    let scripts = crate::store::scripts::Scripts::load();
    for s in scripts.all() {
        e.register(s.name, s.body(false)).unwrap();
    }
    e
}

fn eval(e: &mut LuaHost, body: &str, keys: &[&str], args: &[&str]) -> Reply {
    let name = format!("t{}", body.len());
    e.register(&name, body).unwrap();
    let call = Call {
        script: &name,
        keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
        args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
    };
    e.run(&[call]).unwrap().0.remove(0)
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

#[test]
fn the_sandbox_refuses_undefined_globals_and_the_unsafe_libraries() {
    let mut e = engine();
    for body in [
        "return undefined_name",
        "x = 1",
        "return os.time()",
        "return loadstring('return 1')",
        "return io",
    ] {
        let Reply::Error(text) = eval(&mut e, body, &[], &[]) else {
            panic!("{body} ran");
        };
        assert!(text.contains("global variable"), "{body}: {text}");
    }
    assert_eq!(
        eval(&mut e, "return string.format('%d', math.floor(2.5))", &[], &[]),
        bulk("2")
    );
}

#[test]
fn numbers_cross_as_redis_writes_them() {
    let mut e = engine();
    let r = eval(
        &mut e,
        "redis.call('SET', KEYS[1], 1733000000123456 + 0.5) return redis.call('GET', KEYS[1])",
        &["k"],
        &[],
    );
    assert_eq!(r, bulk("1733000000123456.5"));
    assert_eq!(eval(&mut e, "return 3.9", &[], &[]), Reply::Int(3));
    assert_eq!(
        eval(&mut e, "return {1, 2, nil, 4}", &[], &[]),
        Reply::Array(vec![Reply::Int(1), Reply::Int(2)])
    );
    assert_eq!(eval(&mut e, "return redis.call('GET', 'absent')", &[], &[]), Reply::Nil);
    assert_eq!(
        eval(&mut e, "return redis.call('GET', 'absent') == false", &[], &[]),
        Reply::Int(1)
    );
    assert_eq!(
        eval(
            &mut e,
            "redis.call('SET', 'z', '007') return redis.call('GET', 'z')",
            &[],
            &[]
        ),
        bulk("007")
    );
}

#[test]
fn errors_keep_their_text_and_a_failed_script_writes_nothing() {
    let mut e = engine();
    let r = eval(
        &mut e,
        "redis.call('SET', 'a', 1) return redis.call('HGET', 'a', 'f')",
        &[],
        &[],
    );
    assert!(matches!(&r, Reply::Error(t) if t.starts_with("WRONGTYPE")), "{r:?}");
    assert_eq!(
        eval(&mut e, "return redis.call('EXISTS', 'a')", &[], &[]),
        Reply::Int(0)
    );
    let r = eval(
        &mut e,
        "local r = redis.pcall('HGET', 'b', 'f') redis.call('SET', 'b', 1) return r",
        &[],
        &[],
    );
    assert_eq!(r, Reply::Nil);
    let r = eval(
        &mut e,
        "local r = redis.pcall('HGET', 'b', 'f') return r['err']",
        &[],
        &[],
    );
    assert!(matches!(&r, Reply::Bulk(t) if t.starts_with(b"WRONGTYPE")), "{r:?}");
    let r = eval(&mut e, "local r = redis.pcall('HGET', 'b', 'f') error(r)", &[], &[]);
    assert!(matches!(&r, Reply::Error(t) if t.starts_with("WRONGTYPE")), "{r:?}");
    assert_eq!(
        eval(&mut e, "return redis.error_reply('EMQSTALE no')", &[], &[]),
        Reply::Error("EMQSTALE no".into())
    );
    assert_eq!(
        eval(&mut e, "return redis.status_reply('OK')", &[], &[]),
        Reply::Status("OK".into())
    );
    let r = eval(&mut e, "return redis.call('FLUSHALL')", &[], &[]);
    assert!(matches!(&r, Reply::Error(t) if t.contains("FLUSHALL")), "{r:?}");
}

#[test]
fn collections_keep_their_sizes_and_orders() {
    let mut e = engine();
    let r = eval(
        &mut e,
        "redis.call('ZADD', 'z', 2, 'b', 1, 'c', 2, 'a') redis.call('ZADD', 'z', 'XX', 0, 'c', 5, 'nope')
         return {redis.call('ZCARD', 'z'), redis.call('ZRANGE', 'z', 0, -1, 'WITHSCORES'),
                 redis.call('ZRANGEBYSCORE', 'z', '(0', '+inf', 'LIMIT', 0, 1), redis.call('ZRANK', 'z', 'b'),
                 redis.call('ZREVRANGE', 'z', 0, 0)}",
        &[],
        &[],
    );
    let arr = |v: &[&str]| Reply::Array(v.iter().map(|s| bulk(s)).collect());
    assert_eq!(
        r,
        Reply::Array(vec![
            Reply::Int(3),
            arr(&["c", "0", "a", "2", "b", "2"]),
            arr(&["a"]),
            Reply::Int(2),
            arr(&["b"]),
        ])
    );
    let r = eval(
        &mut e,
        "for i = 1, 20 do redis.call('RPUSH', 'l', i) end redis.call('LTRIM', 'l', -16, -1)
         return {redis.call('LLEN', 'l'), redis.call('LRANGE', 'l', 0, 1), redis.call('LRANGE', 'l', -1, -1)}",
        &[],
        &[],
    );
    assert_eq!(r, Reply::Array(vec![Reply::Int(16), arr(&["5", "6"]), arr(&["20"])]));
    let r = eval(
        &mut e,
        "redis.call('HSET', 'h', 'a', 1, 'b', 2, 'a', 3) redis.call('HDEL', 'h', 'b')
         return {redis.call('HLEN', 'h'), redis.call('HGET', 'h', 'a'), redis.call('HINCRBY', 'h', 'n', 5)}",
        &[],
        &[],
    );
    assert_eq!(r, Reply::Array(vec![Reply::Int(1), bulk("3"), Reply::Int(5)]));
    // an emptied collection is gone
    let r = eval(
        &mut e,
        "redis.call('ZREM', 'z', 'a', 'b', 'c') return redis.call('TYPE', 'z')",
        &[],
        &[],
    );
    assert_eq!(r, Reply::Status("none".into()));
    let r = eval(
        &mut e,
        "redis.call('SET', 'n', '9223372036854775807') return redis.pcall('INCR', 'n')",
        &[],
        &[],
    );
    assert!(matches!(&r, Reply::Error(t) if t.contains("overflow")), "{r:?}");
}

#[test]
fn the_verbs_scripts_run_enqueue_claim_and_complete_many() {
    let e = engine();
    let q = crate::keyspace::QueueName::new("spike").unwrap();
    let k = crate::keyspace::QueueKeys::new(&q);
    let b = |s: String| s.into_bytes();
    let enqueue = Call {
        script: "enqueue",
        keys: vec![
            b(k.id()),
            b(k.pending()),
            b(k.scheduled()),
            b(k.ring()),
            b(k.groups()),
            b(k.wake()),
            b(k.obliterating()),
            b(k.registered()),
            b(k.order()),
        ],
        args: vec![
            b(k.base().to_string()),
            b"3".to_vec(),
            b"p1".to_vec(),
            b"p2".to_vec(),
            b"p3".to_vec(),
        ],
    };
    let (replies, _) = e.run(&[enqueue]).unwrap();
    let Reply::Array(r) = &replies[0] else {
        panic!("{replies:?}")
    };
    assert_eq!(r[0], Reply::Int(1), "{r:?}");
    let claim = Call {
        script: "claim",
        keys: vec![
            b(k.ring()),
            b(k.groups()),
            b(k.pending()),
            b(k.active()),
            b(k.paused()),
            b(k.obliterating()),
            b(k.throttled()),
            b(k.tats()),
            b(k.tat()),
        ],
        args: [k.base(), "2", "30000", "3", "0", "1000000"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect(),
    };
    let (replies, _) = e.run(&[claim]).unwrap();
    let Reply::Array(r) = &replies[0] else {
        panic!("{replies:?}")
    };
    assert_eq!(r.len(), 2 * 9 + 2, "{r:?}");
    assert_eq!(
        (&r[0], &r[1], &r[2]),
        (&bulk("1"), &bulk("p1"), &Reply::Int(1)),
        "{r:?}"
    );
    assert_eq!((&r[9], &r[10]), (&bulk("2"), &bulk("p2")));
    let complete = Call {
        script: "complete_many",
        keys: vec![b(k.active())],
        args: [k.base(), "3", "0", "1", "1", "", "2", "2", "", "9", "1", ""]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect(),
    };
    let (replies, _) = e.run(&[complete]).unwrap();
    assert_eq!(
        replies[0],
        Reply::Array(vec![Reply::Int(1), Reply::Int(0), Reply::Int(-1)])
    );
}
