-- 0002: fencing tokens on claims, the signature replay memory, the event outbox and
-- the retention mark of purged items. Times are fixed-width ISO-8601 UTC text.

-- The lease a running item is held under; done/failed must present it (NULL when queued).
ALTER TABLE items ADD COLUMN claim_id TEXT;
-- Set when retention dropped a done item's data; the row stays so a replay is a duplicate.
ALTER TABLE items ADD COLUMN purged_at TEXT;
CREATE INDEX items_finished ON items (status, finished_at);
CREATE INDEX item_history_replaced ON item_history (replaced_at);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- Signatures (the v1 hex) seen within the clock-skew window, so a replay is refused by
-- every server process; a row may go once its time has left the window.
CREATE TABLE used_signatures (
    signature  TEXT PRIMARY KEY,
    expires_at TEXT NOT NULL
);
CREATE INDEX used_signatures_expiry ON used_signatures (expires_at);

-- The outbox. seq comes from the one counter row, updated in the writing transaction:
-- its row lock makes sequence order the commit order (see docs/ingest-contract.md).
CREATE TABLE event_counter (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    last_seq BIGINT NOT NULL
);
INSERT INTO event_counter (id, last_seq) VALUES (1, 0);

CREATE TABLE events (
    seq          BIGINT PRIMARY KEY,
    type         TEXT NOT NULL,
    dedupe_key   TEXT NOT NULL,
    version      INTEGER NOT NULL,
    content_hash TEXT,
    attempts     INTEGER,
    created_at   TEXT NOT NULL
);
CREATE INDEX events_created ON events (created_at);
