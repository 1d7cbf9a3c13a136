-- The diskless catalog (docs/diskless.md): the order of every diskless topic.
-- Version 1. Applied by rustka/storage/diskless/catalog.py under an advisory lock.

CREATE TABLE IF NOT EXISTS rustka_schema (
    version integer PRIMARY KEY
);

-- A diskless topic: its definition, shared by every broker.
CREATE TABLE IF NOT EXISTS topics (
    topic_id   bigserial PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    partitions integer NOT NULL CHECK (partitions > 0),
    configs    jsonb NOT NULL DEFAULT '{}'::jsonb
);

-- A partition's bounds. Its row is the lock that orders every commit to it.
CREATE TABLE IF NOT EXISTS partitions (
    topic_id         bigint NOT NULL REFERENCES topics ON DELETE CASCADE,
    partition        integer NOT NULL,
    log_start_offset bigint NOT NULL DEFAULT 0,
    high_watermark   bigint NOT NULL DEFAULT 0,
    size_bytes       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
);

-- An uploaded object; used_bytes falls as rows that point into it go, and an object
-- at 0 is the collector's to delete.
CREATE TABLE IF NOT EXISTS objects (
    object_id  bigserial PRIMARY KEY,
    object_key text NOT NULL UNIQUE,
    broker_id  integer NOT NULL,
    size       bigint NOT NULL,
    used_bytes bigint NOT NULL,
    created_ms bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS objects_unused ON objects (object_id) WHERE used_bytes = 0;

-- One stored payload (one or more record batches of one producer): where its bytes
-- are, and the offsets it was given.
CREATE TABLE IF NOT EXISTS batches (
    topic_id        bigint NOT NULL,
    partition       integer NOT NULL,
    base_offset     bigint NOT NULL,
    last_offset     bigint NOT NULL,
    object_id       bigint NOT NULL REFERENCES objects,
    byte_offset     bigint NOT NULL,
    byte_size       bigint NOT NULL,
    base_timestamp  bigint NOT NULL,
    max_timestamp   bigint NOT NULL,
    timestamp_type  smallint NOT NULL,
    log_append_time bigint NOT NULL,
    producer_id     bigint NOT NULL,
    producer_epoch  smallint NOT NULL,
    base_sequence   integer NOT NULL,
    last_sequence   integer NOT NULL,
    PRIMARY KEY (topic_id, partition, base_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS batches_by_last ON batches (topic_id, partition, last_offset);
CREATE INDEX IF NOT EXISTS batches_by_producer
    ON batches (topic_id, partition, producer_id, base_sequence) WHERE producer_id >= 0;
CREATE INDEX IF NOT EXISTS batches_by_object ON batches (object_id);

-- Each idempotent producer's last epoch and sequence on a partition (Kafka's
-- ProducerStateManager, as rustka/storage/producer_state.py keeps it locally).
CREATE TABLE IF NOT EXISTS producers (
    topic_id       bigint NOT NULL,
    partition      integer NOT NULL,
    producer_id    bigint NOT NULL,
    producer_epoch smallint NOT NULL,
    last_sequence  integer NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id),
    FOREIGN KEY (topic_id, partition) REFERENCES partitions ON DELETE CASCADE
);

-- The commit of one uploaded object: one transaction, one round trip. Entries are
-- parallel arrays; one result row per entry, in order. Errors: 0 none,
-- 1 unknown partition, 2 duplicate (base_offset is the original's), 3 out of order
-- sequence, 4 fenced epoch. A refused entry changes nothing; the others commit.
CREATE OR REPLACE FUNCTION rustka_commit(
    p_key text, p_broker integer, p_size bigint, p_now bigint,
    p_topics text[], p_partitions integer[], p_byte_offsets bigint[], p_byte_sizes bigint[],
    p_counts integer[], p_base_ts bigint[], p_max_ts bigint[], p_ts_types smallint[],
    p_pids bigint[], p_epochs smallint[], p_seqs integer[]
) RETURNS TABLE (idx integer, error smallint, base_offset bigint, log_start bigint,
                 append_time bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_object bigint;
    v_used bigint := 0;
    v_tid bigint;
    v_hw bigint;
    v_start bigint;
    v_last_seq integer;
    v_dup bigint;
    v_epoch smallint;
    v_prev_seq integer;
    v_next integer;
    v_time bigint;
BEGIN
    INSERT INTO objects (object_key, broker_id, size, used_bytes, created_ms)
        VALUES (p_key, p_broker, p_size, 0, p_now)
        RETURNING object_id INTO v_object;
    -- Every partition touched is locked first, in one order, so two brokers'
    -- commits wait for each other instead of deadlocking.
    PERFORM 1 FROM partitions p JOIN topics t USING (topic_id)
        JOIN (SELECT DISTINCT unnest(p_topics) AS name, unnest(p_partitions) AS part) w
          ON w.name = t.name AND w.part = p.partition
        ORDER BY p.topic_id, p.partition
        FOR UPDATE OF p;
    FOR i IN 1 .. coalesce(array_length(p_topics, 1), 0) LOOP
        SELECT p.topic_id, p.high_watermark, p.log_start_offset INTO v_tid, v_hw, v_start
            FROM partitions p JOIN topics t USING (topic_id)
            WHERE t.name = p_topics[i] AND p.partition = p_partitions[i];
        IF NOT FOUND THEN
            RETURN QUERY SELECT i, 1::smallint, -1::bigint, -1::bigint, -1::bigint;
            CONTINUE;
        END IF;
        v_last_seq := -1;
        IF p_pids[i] >= 0 THEN
            v_last_seq := ((p_seqs[i]::bigint + p_counts[i] - 1) % 2147483648)::integer;
            SELECT pr.producer_epoch, pr.last_sequence INTO v_epoch, v_prev_seq
                FROM producers pr
                WHERE pr.topic_id = v_tid AND pr.partition = p_partitions[i]
                  AND pr.producer_id = p_pids[i];
            IF FOUND THEN
                IF p_epochs[i] < v_epoch THEN
                    RETURN QUERY SELECT i, 4::smallint, -1::bigint, v_start, -1::bigint;
                    CONTINUE;
                ELSIF p_epochs[i] > v_epoch THEN
                    IF p_seqs[i] <> 0 THEN
                        RETURN QUERY SELECT i, 3::smallint, -1::bigint, v_start, -1::bigint;
                        CONTINUE;
                    END IF;
                ELSE
                    SELECT b.base_offset INTO v_dup FROM batches b
                        WHERE b.topic_id = v_tid AND b.partition = p_partitions[i]
                          AND b.producer_id = p_pids[i] AND b.producer_epoch = p_epochs[i]
                          AND b.base_sequence = p_seqs[i] AND b.last_sequence = v_last_seq
                        LIMIT 1;
                    IF FOUND THEN
                        RETURN QUERY SELECT i, 2::smallint, v_dup, v_start, -1::bigint;
                        CONTINUE;
                    END IF;
                    v_next := CASE WHEN v_prev_seq = 2147483647 THEN 0 ELSE v_prev_seq + 1 END;
                    IF p_seqs[i] <> v_next THEN
                        RETURN QUERY SELECT i, 3::smallint, -1::bigint, v_start, -1::bigint;
                        CONTINUE;
                    END IF;
                END IF;
            END IF;
            INSERT INTO producers (topic_id, partition, producer_id, producer_epoch, last_sequence)
                VALUES (v_tid, p_partitions[i], p_pids[i], p_epochs[i], v_last_seq)
                ON CONFLICT (topic_id, partition, producer_id) DO UPDATE
                    SET producer_epoch = EXCLUDED.producer_epoch,
                        last_sequence = EXCLUDED.last_sequence;
        END IF;
        v_time := CASE WHEN p_ts_types[i] = 1 THEN p_now ELSE -1 END;
        INSERT INTO batches VALUES (
            v_tid, p_partitions[i], v_hw, v_hw + p_counts[i] - 1, v_object,
            p_byte_offsets[i], p_byte_sizes[i], p_base_ts[i], p_max_ts[i], p_ts_types[i],
            v_time, p_pids[i], p_epochs[i], p_seqs[i], v_last_seq);
        UPDATE partitions SET high_watermark = v_hw + p_counts[i],
                              size_bytes = size_bytes + p_byte_sizes[i]
            WHERE topic_id = v_tid AND partition = p_partitions[i];
        v_used := v_used + p_byte_sizes[i];
        RETURN QUERY SELECT i, 0::smallint, v_hw, v_start, v_time;
    END LOOP;
    UPDATE objects SET used_bytes = v_used WHERE object_id = v_object;
END;
$$;

-- Rows below a new log start go; their objects' used bytes fall with them.
CREATE OR REPLACE FUNCTION rustka_truncate(p_tid bigint, p_partition integer, p_start bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_start bigint;
BEGIN
    WITH gone AS (
        DELETE FROM batches b
        WHERE b.topic_id = p_tid AND b.partition = p_partition AND b.last_offset < p_start
        RETURNING b.object_id, b.byte_size
    ), used AS (
        SELECT object_id, sum(byte_size) AS bytes FROM gone GROUP BY object_id
    ), sized AS (
        UPDATE objects o SET used_bytes = o.used_bytes - used.bytes
        FROM used WHERE o.object_id = used.object_id
        RETURNING used.bytes
    )
    UPDATE partitions SET log_start_offset = greatest(log_start_offset, p_start),
                          size_bytes = size_bytes - coalesce((SELECT sum(bytes) FROM sized), 0)
        WHERE topic_id = p_tid AND partition = p_partition
        RETURNING log_start_offset INTO v_start;
    RETURN v_start;
END;
$$;

-- Cluster membership (docs/diskless.md, "A cluster of brokers"). A broker holds its
-- id for as long as it renews its lease; the database's clock is the only clock
-- leases are measured on. The incarnation tells a restart of the same broker (same
-- data dir) from another process claiming a live broker's id.
CREATE TABLE IF NOT EXISTS brokers (
    broker_id   integer PRIMARY KEY,
    incarnation uuid NOT NULL,
    host        text NOT NULL,
    port        integer NOT NULL,
    rack        text,
    lease_until timestamptz NOT NULL,
    joined_at   timestamptz NOT NULL DEFAULT now()
);

-- Named roles one broker holds at a time ('group_coordinator'); the epoch rises each
-- time the role passes to another broker incarnation.
CREATE TABLE IF NOT EXISTS leases (
    name        text PRIMARY KEY,
    broker_id   integer NOT NULL,
    incarnation uuid NOT NULL,
    epoch       bigint NOT NULL,
    lease_until timestamptz NOT NULL
);

-- The local (non-diskless) topics of each broker, so every broker's Metadata names
-- them with the broker that holds them as leader.
CREATE TABLE IF NOT EXISTS local_topics (
    name       text PRIMARY KEY,
    broker_id  integer NOT NULL,
    partitions integer NOT NULL CHECK (partitions > 0)
);

-- Committed offsets of consumer groups in a cluster: written by the group
-- coordinator, read by the next one when the role passes.
CREATE TABLE IF NOT EXISTS group_offsets (
    group_id         text NOT NULL,
    topic            text NOT NULL,
    partition        integer NOT NULL,
    committed_offset bigint NOT NULL,
    metadata         text NOT NULL DEFAULT '',
    commit_ms        bigint NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);

-- One broker's heartbeat: renew (or take) its registration, try for each named role,
-- and return what the cluster looks like, in one round trip. Result rows:
-- kind 'broker' (id, host, port, rack) for each live broker, then kind 'lease'
-- (id = holder, port = epoch, host = role name) for each held role. Raises
-- 'rustka_broker_id_taken' when another live incarnation holds p_broker.
CREATE OR REPLACE FUNCTION rustka_heartbeat(
    p_broker integer, p_incarnation uuid, p_previous uuid, p_host text, p_port integer,
    p_rack text, p_lease_ms integer, p_roles text[]
) RETURNS TABLE (kind text, id integer, host text, port bigint, rack text)
LANGUAGE plpgsql AS $$
DECLARE
    v_until timestamptz := clock_timestamp() + make_interval(secs => p_lease_ms / 1000.0);
    v_row brokers%ROWTYPE;
    v_role text;
BEGIN
    SELECT * INTO v_row FROM brokers b WHERE b.broker_id = p_broker FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO brokers (broker_id, incarnation, host, port, rack, lease_until)
        VALUES (p_broker, p_incarnation, p_host, p_port, p_rack, v_until);
    ELSIF v_row.incarnation = p_incarnation
          OR v_row.incarnation = p_previous
          OR v_row.lease_until < clock_timestamp() THEN
        UPDATE brokers b SET incarnation = p_incarnation, host = p_host, port = p_port,
            rack = p_rack, lease_until = v_until,
            joined_at = CASE WHEN v_row.incarnation = p_incarnation THEN b.joined_at
                        ELSE now() END
        WHERE b.broker_id = p_broker;
    ELSE
        RAISE EXCEPTION 'broker id % is held by a live broker at %:%',
            p_broker, v_row.host, v_row.port USING ERRCODE = 'RK001';
    END IF;
    FOREACH v_role IN ARRAY p_roles LOOP
        INSERT INTO leases AS l (name, broker_id, incarnation, epoch, lease_until)
        VALUES (v_role, p_broker, p_incarnation, 1, v_until)
        ON CONFLICT (name) DO UPDATE SET
            broker_id = EXCLUDED.broker_id,
            incarnation = EXCLUDED.incarnation,
            epoch = l.epoch + CASE WHEN l.incarnation = EXCLUDED.incarnation THEN 0 ELSE 1 END,
            lease_until = EXCLUDED.lease_until
        WHERE l.incarnation = EXCLUDED.incarnation OR l.lease_until < clock_timestamp();
    END LOOP;
    RETURN QUERY
        SELECT 'broker'::text, b.broker_id, b.host, b.port::bigint, b.rack FROM brokers b
        WHERE b.lease_until >= clock_timestamp() ORDER BY b.broker_id;
    RETURN QUERY
        SELECT 'lease'::text, l.broker_id, l.name, l.epoch, NULL::text FROM leases l
        WHERE l.lease_until >= clock_timestamp();
END
$$;

-- The cluster's id, the same from every broker (Kafka clients refuse a cluster whose
-- brokers name different ids). One row.
CREATE TABLE IF NOT EXISTS cluster (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    cluster_id text NOT NULL
);

-- Documents every broker of a cluster shares, each written whole under its row's lock
-- ('acls', 'credentials': the same encodings as the single broker's files); the
-- version rises with each change, so brokers see a change on their next heartbeat.
CREATE TABLE IF NOT EXISTS cluster_documents (
    name    text PRIMARY KEY,
    version bigint NOT NULL,
    body    bytea NOT NULL
);
