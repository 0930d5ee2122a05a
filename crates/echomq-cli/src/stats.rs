//! `emq stats`: sizes per state and the counters of one queue or of every queue.

use echomq::store::Counts;
use echomq::QueueName;

/// Sizes per state and the counters, per queue.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only this queue (default: every queue the store knows). A queue never used prints zeros.
    pub queue: Option<String>,
    /// One JSON object per line per queue (NDJSON): queue, pending, scheduled, active, dead,
    /// completed, cancelled (counters since the queue was created or obliterated), paused.
    #[arg(long)]
    pub json: bool,
}

/// Runs `emq stats`.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let named = args.queue.as_deref().map(QueueName::new).transpose()?;
    let store = crate::open(url).await?;
    let mut queues = match named {
        Some(q) => vec![q],
        None => store.queues().await?,
    };
    queues.sort();
    let mut rows = Vec::with_capacity(queues.len());
    for q in queues {
        let counts = store.counts(&q).await?;
        rows.push((q, counts));
    }
    if args.json {
        print_json(&rows);
    } else {
        print_table(&rows);
    }
    Ok(0)
}

/// One NDJSON line, its fields in the documented order.
fn json_line(queue: &QueueName, c: &Counts) -> String {
    format!(
        "{{\"queue\":{},\"pending\":{},\"scheduled\":{},\"active\":{},\"dead\":{},\"completed\":{},\"cancelled\":{},\"paused\":{}}}",
        serde_json::Value::from(queue.as_str()),
        c.pending,
        c.scheduled,
        c.active,
        c.dead,
        c.completed,
        c.cancelled,
        c.paused,
    )
}

#[allow(clippy::print_stdout)] // the NDJSON lines are the command's result
fn print_json(rows: &[(QueueName, Counts)]) {
    for (q, c) in rows {
        println!("{}", json_line(q, c));
    }
}

#[allow(clippy::print_stdout, clippy::print_stderr)] // the table is the command's result
fn print_table(rows: &[(QueueName, Counts)]) {
    if rows.is_empty() {
        eprintln!("no queues yet");
        return;
    }
    const HEAD: [&str; 8] = [
        "QUEUE",
        "PENDING",
        "SCHEDULED",
        "ACTIVE",
        "DEAD",
        "COMPLETED",
        "CANCELLED",
        "PAUSED",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|(q, c)| {
            [
                q.to_string(),
                c.pending.to_string(),
                c.scheduled.to_string(),
                c.active.to_string(),
                c.dead.to_string(),
                c.completed.to_string(),
                c.cancelled.to_string(),
                if c.paused { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    let mut width = HEAD.map(str::len);
    for row in &cells {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |row: [&str; 8]| {
        let mut out = format!("{:<w$}", row[0], w = width[0]);
        for (i, cell) in row.iter().enumerate().skip(1) {
            // numbers right-aligned; the last column (paused) left-aligned
            if i == 7 {
                out.push_str(&format!("  {cell:<w$}", w = width[i]));
            } else {
                out.push_str(&format!("  {cell:>w$}", w = width[i]));
            }
        }
        out.trim_end().to_string()
    };
    println!("{}", line(HEAD));
    for row in &cells {
        println!("{}", line(row.each_ref().map(String::as_str)));
    }
}
