-- 0004: the page an item came from (optional in the contract; NULL when not sent).
-- Metadata written with each new version; a duplicate (same content hash) leaves it.
ALTER TABLE items ADD COLUMN url TEXT;
