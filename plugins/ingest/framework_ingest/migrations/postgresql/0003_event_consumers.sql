-- 0003: consumer cursors. A consumer that registers here acknowledges how far it has
-- processed the event stream; retention never purges an event above the lowest cursor.
CREATE TABLE event_consumers (
    name       TEXT PRIMARY KEY,
    last_seq   BIGINT NOT NULL,
    updated_at TEXT NOT NULL
);
