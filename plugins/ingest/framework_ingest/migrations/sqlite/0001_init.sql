-- 0001: items (one row per dedupe key), their replaced versions, idempotency keys.
-- Times are ISO-8601 UTC text of fixed width, so they compare as text.
CREATE TABLE items (
    dedupe_key   TEXT PRIMARY KEY,
    source_type  TEXT NOT NULL,
    source_id    TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    scraped_at   TEXT NOT NULL,
    data         TEXT NOT NULL,
    version      INTEGER NOT NULL DEFAULT 1,
    received_at  TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    status       TEXT NOT NULL DEFAULT 'queued'
                 CHECK (status IN ('queued', 'running', 'done', 'failed')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    claimed_at   TEXT,
    finished_at  TEXT,
    last_error   TEXT
);
CREATE INDEX items_status ON items (status, updated_at);
CREATE INDEX items_source_type ON items (source_type, status);

CREATE TABLE item_history (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    dedupe_key   TEXT NOT NULL,
    version      INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    scraped_at   TEXT NOT NULL,
    data         TEXT NOT NULL,
    stored_at    TEXT NOT NULL,
    replaced_at  TEXT NOT NULL
);
CREATE INDEX item_history_key ON item_history (dedupe_key, version);

-- The database keeps the history, whatever path the update takes.
CREATE TRIGGER items_keep_history BEFORE UPDATE OF content_hash ON items
WHEN OLD.content_hash IS NOT NEW.content_hash
BEGIN
    INSERT INTO item_history (dedupe_key, version, content_hash, scraped_at, data, stored_at, replaced_at)
    VALUES (OLD.dedupe_key, OLD.version, OLD.content_hash, OLD.scraped_at, OLD.data,
            OLD.updated_at, NEW.updated_at);
END;

CREATE TABLE idempotency_keys (
    key          TEXT PRIMARY KEY,
    fingerprint  TEXT NOT NULL,
    dedupe_key   TEXT NOT NULL,
    status_code  INTEGER,
    response     TEXT,
    created_at   TEXT NOT NULL,
    completed_at TEXT
);
