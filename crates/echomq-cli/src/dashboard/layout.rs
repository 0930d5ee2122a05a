//! The page shell (style, script, navigation), the error pages, and the small renderings every
//! page shares. Every value from the store goes through maud's escaping: a payload of
//! `<script>` shows as text.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::App;

/// The style sheet, compiled in (no CDN: the dashboard works offline).
const STYLE: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center}
header a{color:#fff;text-decoration:none}header .brand{font-weight:700}
main{padding:1em 1.2em;max-width:1200px}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{border-bottom:1px solid #e3e6eb;padding:.35em .6em;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.tabs a{display:inline-block;padding:.3em .8em;margin-right:.2em;border:1px solid #ccd;border-bottom:none;
 border-radius:4px 4px 0 0;text-decoration:none;color:#1d2330;background:#eef0f4}
.tabs a.on{background:#fff;font-weight:600}
.actions form{display:inline-block;margin:.2em .4em .2em 0}
button{cursor:pointer;padding:.25em .8em}button.danger{color:#a00}
pre{background:#fff;border:1px solid #e3e6eb;padding:.6em;overflow:auto;white-space:pre-wrap;word-break:break-all}
.msg{background:#e8f4e8;border:1px solid #9c9;padding:.4em .8em;margin-bottom:1em}
.msg.warn{background:#fbeee0;border-color:#d9a066}
.orphan{color:#a33;font-weight:bold}
.paused{color:#a60;font-weight:600}dl{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em}
dt{font-weight:600}dd{margin:0}
"#;

/// The live overview: polls the counts while the page is visible — every 2 s, or as the table's
/// `data-poll-ms` says for a page of many queues (`pages::poll_ms`) — and writes each
/// cell whose `data-q`/`data-k` names it; the poll after one that saw a queue's completed or
/// dead-lettered count move asks for the last hour too (at most every 10 s, and at least every
/// minute, as the bars move on) and redraws each queue's chart (`svg.chart[data-q]`) as the server
/// draws it. Text and numbers only: no markup is ever taken from the answer (the bars are made with
/// `createElementNS`).
const LIVE: &str = r#"
(function(){
  var NS='http://www.w3.org/2000/svg',W=3,MID=16,seen={},want=false,last=Date.now();
  function bars(svg,values,up,color){
    var top=Math.max(1,Math.max.apply(null,values));
    values.forEach(function(v,i){
      if(!(v>0))return;
      var h=Math.max(1,v/top*(MID-1)),r=document.createElementNS(NS,'rect');
      r.setAttribute('x',String(i*W));r.setAttribute('y',(up?MID-h:MID).toFixed(1));
      r.setAttribute('width',String(W-1));r.setAttribute('height',h.toFixed(1));r.setAttribute('fill',color);
      svg.appendChild(r);
    });
  }
  function chart(q){
    var svg=document.querySelector('svg.chart[data-q="'+CSS.escape(q.name)+'"]');
    if(!svg||!q.history)return;
    svg.querySelectorAll('rect').forEach(function(r){r.remove();});
    bars(svg,q.history.completed,true,'#3a8a3a');
    bars(svg,q.history.failed,false,'#b33');
    var sum=function(v){return v.reduce(function(a,b){return a+b;},0);};
    var t='last hour: '+sum(q.history.completed)+' completed, '+sum(q.history.failed)+' dead-lettered (a bar a minute)';
    svg.setAttribute('aria-label',t);
    var title=svg.querySelector('title');if(title)title.textContent=t;
  }
  function tick(){
    if(document.visibilityState!=='visible')return;
    var now=Date.now(),withHistory=(want&&now-last>=10000)||now-last>=60000;
    if(withHistory){want=false;last=now;}
    fetch(withHistory?'api/overview?history=1':'api/overview',{credentials:'same-origin'}).then(function(r){return r.json()}).then(function(d){
      d.queues.forEach(function(q){
        Object.keys(q.counts).forEach(function(k){
          var c=document.querySelector('[data-q="'+CSS.escape(q.name)+'"][data-k="'+k+'"]');
          if(c)c.textContent=String(q.counts[k]);
        });
        var done=q.counts.completed+','+q.counts.failed;
        if(seen[q.name]!==undefined&&seen[q.name]!==done)want=true;
        seen[q.name]=done;
        chart(q);
      });
    }).catch(function(){});
  }
  var table=document.querySelector('[data-poll-ms]');
  setInterval(tick,Math.max(2000,Number(table&&table.getAttribute('data-poll-ms'))||2000));
})();
"#;

/// A whole page: the shell around `body`, with `title` in the tab and the heading.
pub(crate) fn page(app: &App, title: &str, body: Markup, live: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · emq dashboard" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    a.brand href="/" { "emq dashboard" }
                    a href="/" { "Overview" }
                    a href="/workers" { "Workers" }
                    @if app.read_only { span { "read-only" } }
                }
                main {
                    h1 { (title) }
                    (body)
                }
                @if live { script { (PreEscaped(LIVE)) } }
            }
        }
    }
}

/// An error page with its status (404 for an unknown queue or job, 403 for a refused action).
pub(crate) fn error_page(status: StatusCode, message: &str) -> Response {
    let body = html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { (status.as_u16()) " · emq dashboard" } style { (PreEscaped(STYLE)) } }
            body {
                header { a.brand href="/" { "emq dashboard" } }
                main { h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) } p { (message) } }
            }
        }
    };
    (status, body).into_response()
}

/// A POST form of one action: its CSRF token, an optional typed confirmation, its button.
pub(crate) fn action(app: &App, to: &str, label: &str, danger: bool, confirm: Option<&str>) -> Markup {
    html! {
        @if !app.read_only {
            form method="post" action=(to) {
                input type="hidden" name="csrf" value=(app.csrf);
                @if let Some(what) = confirm {
                    input type="text" name="confirm" placeholder=(format!("type {what} to confirm")) required;
                }
                button.danger[danger] type="submit" { (label) }
            }
        }
    }
}

/// A time (ms since the epoch, the store's clock) as UTC text.
pub(crate) fn time(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(echomq::schedule::utc)
        .map_or_else(|| ms.to_string(), |t| t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
}

/// Bytes for reading: JSON pretty-printed, other UTF-8 as it is, anything else as its length.
pub(crate) fn bytes(b: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(b) {
        if v.is_object() || v.is_array() {
            if let Ok(pretty) = serde_json::to_string_pretty(&v) {
                return pretty;
            }
        }
    }
    match std::str::from_utf8(b) {
        Ok(text) => text.to_string(),
        Err(_) => format!("({} bytes, not UTF-8)", b.len()),
    }
}

/// A value for a query string, percent-encoded (a space as `+`).
pub(crate) fn query_value(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            b' ' => "+".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether a name can be a path segment: `.` and `..` (valid names) are read by every browser
/// as the current and the parent folder, so a link to them would reach another page.
pub(crate) fn addressable(name: &str) -> bool {
    !name.bytes().all(|b| b == b'.')
}

/// A link to `to` labelled `text`, or the text alone when its last segment is not addressable.
pub(crate) fn link(to: &str, text: &str) -> Markup {
    html! {
        @if addressable(text) { a href=(to) { (text) } } @else { (text) }
    }
}

/// A path segment escaped for a URL (names are `[A-Za-z0-9._:-]`, so only `:` needs it, and it
/// needs it only to keep a segment from reading as a scheme).
pub(crate) fn seg(s: &str) -> String {
    s.replace(':', "%3A")
}
