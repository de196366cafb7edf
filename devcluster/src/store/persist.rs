//! SQLite persistence: write-through, one transaction per mutation.
//!
//! Why SQLite: it is a real, crash-safe store (a mutation is either fully on
//! disk or not at all, even if the process is killed mid-write), and the state is
//! one file a developer can open with `sqlite3` to see exactly what the cluster
//! holds (`SELECT resource, namespace, name FROM objects`). WAL mode keeps
//! per-mutation commits cheap.

use std::path::Path;

use rusqlite::{Connection, params};
use serde_json::Value;

use super::ObjKey;
use crate::DevClusterError;
use crate::status::ApiError;

/// The database, the stored resourceVersion and every stored `(resource, object)`.
pub(super) type Opened = (Db, u64, Vec<(String, Value)>);

pub(super) struct Db {
    conn: Connection,
}

fn db_err(e: rusqlite::Error) -> ApiError {
    ApiError::internal(format!("writing the devcluster data file failed: {e}"))
}

impl Db {
    /// Opens (creating if needed) the file; returns the stored resourceVersion and objects.
    pub(super) fn open(path: &Path) -> Result<Opened, DevClusterError> {
        let err = |e: String| DevClusterError::Data {
            path: path.to_path_buf(),
            message: e,
        };
        let conn = Connection::open(path).map_err(|e| err(e.to_string()))?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS objects (
                 resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, object TEXT NOT NULL,
                 PRIMARY KEY (resource, namespace, name));
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
        )
        .map_err(|e| err(e.to_string()))?;
        let rv: u64 = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'resourceVersion'",
                [],
                |r| r.get::<_, String>(0),
            )
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut rows = Vec::new();
        {
            let mut stmt = conn
                .prepare("SELECT resource, object FROM objects")
                .map_err(|e| err(e.to_string()))?;
            let iter = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .map_err(|e| err(e.to_string()))?;
            for row in iter {
                let (res, text) = row.map_err(|e| err(e.to_string()))?;
                let obj: Value = serde_json::from_str(&text)
                    .map_err(|e| err(format!("corrupt object in {res}: {e}")))?;
                rows.push((res, obj));
            }
        }
        Ok((Db { conn }, rv, rows))
    }

    pub(super) fn put(
        &mut self,
        resource: &str,
        key: &ObjKey,
        obj: &Value,
        rv: u64,
    ) -> Result<(), ApiError> {
        let tx = self.conn.transaction().map_err(db_err)?;
        tx.execute(
            "INSERT OR REPLACE INTO objects (resource, namespace, name, object) VALUES (?1, ?2, ?3, ?4)",
            params![resource, key.0, key.1, obj.to_string()],
        )
        .map_err(db_err)?;
        tx.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('resourceVersion', ?1)",
            params![rv.to_string()],
        )
        .map_err(db_err)?;
        tx.commit().map_err(db_err)
    }

    pub(super) fn delete(&mut self, resource: &str, key: &ObjKey, rv: u64) -> Result<(), ApiError> {
        let tx = self.conn.transaction().map_err(db_err)?;
        tx.execute(
            "DELETE FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
            params![resource, key.0, key.1],
        )
        .map_err(db_err)?;
        tx.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('resourceVersion', ?1)",
            params![rv.to_string()],
        )
        .map_err(db_err)?;
        tx.commit().map_err(db_err)
    }
}
