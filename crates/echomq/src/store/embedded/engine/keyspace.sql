CREATE TABLE IF NOT EXISTS kv_keys (
  kid INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE, type INTEGER NOT NULL,
  size INTEGER NOT NULL DEFAULT 0, head INTEGER NOT NULL DEFAULT 0, value BLOB);
CREATE TABLE IF NOT EXISTS kv_hash (
  kid INTEGER NOT NULL, field BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (kid, field)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv_zset (
  kid INTEGER NOT NULL, member BLOB NOT NULL, score REAL NOT NULL, PRIMARY KEY (kid, member)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_zset_order ON kv_zset (kid, score, member);
CREATE TABLE IF NOT EXISTS kv_list (
  kid INTEGER NOT NULL, pos INTEGER NOT NULL, value BLOB NOT NULL, PRIMARY KEY (kid, pos)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv_set (
  kid INTEGER NOT NULL, member BLOB NOT NULL, PRIMARY KEY (kid, member)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv_jobs (
  id BLOB NOT NULL, base BLOB NOT NULL, fields INTEGER NOT NULL,
  f_data BLOB, f_state BLOB, f_attempts BLOB, f_group BLOB, f_max_attempts BLOB, f_run_at BLOB,
  f_stalled BLOB, f_last_error BLOB, f_cancel BLOB, f_output BLOB, f_finished_at BLOB, f_kind BLOB,
  f_priority BLOB, f_retry BLOB, f_waited BLOB, f_free BLOB, f_dedup BLOB, extra BLOB,
  pending REAL, active REAL,
  PRIMARY KEY (id, base)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_jobs_pending ON kv_jobs (base, pending, id) WHERE pending IS NOT NULL;
CREATE INDEX IF NOT EXISTS kv_jobs_active ON kv_jobs (base, active, id) WHERE active IS NOT NULL;
CREATE TABLE IF NOT EXISTS kv_cancels (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, channel BLOB NOT NULL, message BLOB NOT NULL);
