//! The audit trail's pages.

use serde::Serialize;

use super::{Desk, DeskError};
use crate::filter;
use crate::store::audit::{self, AuditEntry};

/// A page of the audit trail, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub next_cursor: Option<String>,
}

impl Desk {
    /// The audit trail, newest first, and the cursor of the next page.
    pub async fn audit(&self, limit: i64, cursor: Option<&str>) -> Result<AuditPage, DeskError> {
        let after = cursor.map(filter::cursor::decode).transpose()?;
        let mut entries = audit::list(&self.client().await?, limit + 1, after).await?;
        let next = if entries.len() as i64 > limit {
            entries.truncate(usize::try_from(limit).unwrap_or(0));
            entries
                .last()
                .map(|e| filter::cursor::encode(&(e.at, e.id)))
        } else {
            None
        };
        Ok(AuditPage {
            entries,
            next_cursor: next,
        })
    }
}
