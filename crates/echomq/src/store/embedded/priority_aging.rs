//! The twin of `scripts/priority_aging.lua`: the queue's priority aging as the twins that rank
//! ready jobs read it (absent: the default).

use std::time::Duration;

use super::common::Order;
use super::db::Db;
use crate::error::Result;

pub(crate) fn priority_aging(db: &Db) -> Result<Duration> {
    Ok(Duration::from_millis(Order::read(db)?.aging() as u64))
}
