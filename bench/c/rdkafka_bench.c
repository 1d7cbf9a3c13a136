/*
 * The C client of the benchmark harness: librdkafka with no language binding in
 * between, so a K row measures the broker and not the driver (docs/performance.md,
 * "C client rows").
 *
 *   rdkafka_bench produce BOOTSTRAP TOPIC PARTITIONS COUNT PRODUCERS SERVER_PID
 *   rdkafka_bench consume BOOTSTRAP TOPIC PARTITIONS COUNT SERVER_PID IDLE_SECONDS
 *   rdkafka_bench check PARTITIONS COUNT < "partition offset" lines
 *
 * produce: COUNT records (16-byte key, the harness's 100-byte value), record i to
 *   partition i % PARTITIONS, split into PRODUCERS contiguous shares, one producer
 *   instance (own connection) and thread per share; acks=all, linger 5 ms, 1 MiB
 *   batches. Every record's delivery report is kept: the run passes only if every
 *   record was acknowledged and each partition's offsets are contiguous, once each.
 * check: the produce check alone, on record i's acknowledged partition and offset
 *   read from line i of stdin (offset -1: never acknowledged), so a test can show
 *   that it finds a gap, a duplicate or a missing acknowledgement.
 * consume: one consumer assigned PARTITIONS partitions from offset 0 (librdkafka
 *   fetches them all in one Fetch per broker); passes only if each partition gives
 *   its share of COUNT with offsets 0, 1, 2... in order and every value intact.
 *
 * Prints one JSON object in the shape of bench/_common.py's Result. The clock
 * (wall, own CPU, and the broker's CPU from /proc/SERVER_PID/stat) covers the
 * records only: connections and metadata are set up before it starts.
 */
#include <librdkafka/rdkafka.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define KEY_SIZE 16
#define VALUE_SIZE 100
#define TIMEOUT_MS 60000

static unsigned char VALUE[VALUE_SIZE];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double own_cpu(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* User + system CPU seconds of the whole server process, as bench/_common.py reads it. */
static double server_cpu(long pid) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0.0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return 0.0;
    unsigned long utime = 0, stime = 0;
    /* Fields after the command name: state is field 3; utime and stime are 14 and 15. */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
        return 0.0;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

struct clock {
    double wall, client, server;
    long pid;
};

static void clock_start(struct clock *c, long pid) {
    c->pid = pid;
    c->server = server_cpu(pid);
    c->client = own_cpu();
    c->wall = now();
}

static void clock_stop(struct clock *c) {
    c->wall = now() - c->wall;
    c->client = own_cpu() - c->client;
    c->server = server_cpu(c->pid) - c->server;
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar((unsigned char)*s < 0x20 ? ' ' : *s);
    }
    putchar('"');
}

static void report(long records, const struct clock *c, int ok, const char *note, int partitions,
                   int clients) {
    printf("{\"records\": %ld, \"seconds\": %.6f, \"client_cpu\": %.4f, \"server_cpu\": %.4f, "
           "\"p50_us\": null, \"p99_us\": null, \"ok\": %s, \"note\": ",
           records, c->wall, c->client, c->server, ok ? "true" : "false");
    json_string(note);
    printf(", \"extra\": {\"librdkafka\": ");
    json_string(rd_kafka_version_str());
    printf(", \"partitions\": %d, \"clients\": %d}}\n", partitions, clients);
    fflush(stdout);
}

static void fail(const char *what, const char *why) {
    struct clock c = {0};
    char note[512];
    snprintf(note, sizeof note, "%s: %s", what, why);
    report(0, &c, 0, note, 0, 0);
    exit(1);
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char err[256];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK)
        fail(name, err);
}

/* ------------------------------------------------------------------ produce */

static int64_t *offsets;     /* offset per record index, -1 until acknowledged */
static int32_t *partition_of; /* partition the broker acknowledged it in */
static long failures;
static char first_failure[256];
static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;

static void delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    long i = (long)(intptr_t)m->_private;
    if (m->err) {
        pthread_mutex_lock(&failure_lock);
        if (!failures++) snprintf(first_failure, sizeof first_failure, "%s", rd_kafka_err2str(m->err));
        pthread_mutex_unlock(&failure_lock);
        return;
    }
    offsets[i] = m->offset;
    partition_of[i] = m->partition;
}

struct share {
    rd_kafka_t *rk;
    const char *topic;
    long start, end;
    int partitions;
    long left; /* records still queued after the final flush */
    char error[256];
};

static void *produce_share(void *arg) {
    struct share *s = arg;
    char key[32];
    for (long i = s->start; i < s->end; i++) {
        snprintf(key, sizeof key, "key-%012ld", i);
        for (;;) {
            /* The key is always copied; the value is static, so it is not. */
            rd_kafka_resp_err_t err = rd_kafka_producev(
                s->rk, RD_KAFKA_V_TOPIC(s->topic), RD_KAFKA_V_PARTITION((int32_t)(i % s->partitions)),
                RD_KAFKA_V_KEY(key, KEY_SIZE), RD_KAFKA_V_VALUE(VALUE, VALUE_SIZE),
                RD_KAFKA_V_OPAQUE((void *)(intptr_t)i), RD_KAFKA_V_END);
            if (!err) break;
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                snprintf(s->error, sizeof s->error, "produce: %s", rd_kafka_err2str(err));
                return NULL;
            }
            rd_kafka_poll(s->rk, 1);
        }
        rd_kafka_poll(s->rk, 0);
    }
    rd_kafka_flush(s->rk, TIMEOUT_MS);
    s->left = rd_kafka_outq_len(s->rk);
    return NULL;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* '' if every record was acknowledged and each partition's offsets are base, base+1, ... */
static void check_deliveries(long n, int partitions, char *problem, size_t size) {
    problem[0] = 0;
    if (failures) {
        snprintf(problem, size, "%ld records failed: %s", failures, first_failure);
        return;
    }
    int64_t *sorted = malloc(sizeof(int64_t) * (size_t)(n / partitions + 1));
    for (int p = 0; p < partitions; p++) {
        long k = 0;
        for (long i = p; i < n; i += partitions) {
            if (offsets[i] < 0) {
                snprintf(problem, size, "record %ld was never acknowledged", i);
                free(sorted);
                return;
            }
            if (partition_of[i] != p) {
                snprintf(problem, size, "record %ld acknowledged in partition %d, sent to %d", i,
                         partition_of[i], p);
                free(sorted);
                return;
            }
            sorted[k++] = offsets[i];
        }
        qsort(sorted, (size_t)k, sizeof(int64_t), cmp64);
        for (long j = 1; j < k; j++) {
            if (sorted[j] != sorted[0] + j) {
                snprintf(problem, size,
                         "partition %d: offset %lld where %lld was expected: gap or duplicate", p,
                         (long long)sorted[j], (long long)(sorted[0] + j));
                free(sorted);
                return;
            }
        }
    }
    free(sorted);
}

static rd_kafka_t *new_client(rd_kafka_type_t type, const char *bootstrap, const char *group) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    if (type == RD_KAFKA_PRODUCER) {
        /* The settings of bench/kafka_driver.py's PRODUCER, so C and Python rows compare. */
        set(conf, "acks", "all");
        set(conf, "linger.ms", "5");
        set(conf, "batch.size", "1048576");
        set(conf, "compression.type", "none");
        set(conf, "enable.idempotence", "false");
        set(conf, "queue.buffering.max.messages", "2000000");
        set(conf, "queue.buffering.max.kbytes", "1048576");
        set(conf, "message.max.bytes", "4194304");
        rd_kafka_conf_set_dr_msg_cb(conf, delivered);
    } else {
        /* bench/kafka_driver.py's CONSUMER. */
        set(conf, "group.id", group);
        set(conf, "enable.auto.commit", "false");
        set(conf, "auto.offset.reset", "earliest");
        set(conf, "fetch.max.bytes", "4194304");
        set(conf, "max.partition.fetch.bytes", "1048576");
        set(conf, "fetch.wait.max.ms", "100");
        set(conf, "queued.min.messages", "200000");
    }
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof err);
    if (!rk) fail("rd_kafka_new", err);
    return rk;
}

/* Connect and learn the topic's leaders before the clock starts. */
static void warm(rd_kafka_t *rk, const char *topic) {
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, t, &md, TIMEOUT_MS);
    if (err) fail("metadata", rd_kafka_err2str(err));
    if (md->topic_cnt != 1 || md->topics[0].err)
        fail("metadata", md->topic_cnt ? rd_kafka_err2str(md->topics[0].err) : "no topic");
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
}

static int produce(const char *bootstrap, const char *topic, int partitions, long n, int producers,
                   long pid) {
    offsets = malloc(sizeof(int64_t) * (size_t)n);
    partition_of = malloc(sizeof(int32_t) * (size_t)n);
    for (long i = 0; i < n; i++) offsets[i] = -1;
    struct share *shares = calloc((size_t)producers, sizeof *shares);
    pthread_t *threads = calloc((size_t)producers, sizeof *threads);
    for (int t = 0; t < producers; t++) {
        shares[t].rk = new_client(RD_KAFKA_PRODUCER, bootstrap, NULL);
        shares[t].topic = topic;
        shares[t].partitions = partitions;
        shares[t].start = n * t / producers;
        shares[t].end = n * (t + 1) / producers;
        warm(shares[t].rk, topic);
    }
    struct clock c;
    clock_start(&c, pid);
    for (int t = 0; t < producers; t++) pthread_create(&threads[t], NULL, produce_share, &shares[t]);
    for (int t = 0; t < producers; t++) pthread_join(threads[t], NULL);
    clock_stop(&c);
    char problem[512] = "";
    for (int t = 0; t < producers && !problem[0]; t++) {
        if (shares[t].error[0]) snprintf(problem, sizeof problem, "%s", shares[t].error);
        else if (shares[t].left)
            snprintf(problem, sizeof problem, "%ld records undelivered after %d s", shares[t].left,
                     TIMEOUT_MS / 1000);
    }
    if (!problem[0]) check_deliveries(n, partitions, problem, sizeof problem);
    char note[512];
    if (problem[0]) snprintf(note, sizeof note, "%s", problem);
    else snprintf(note, sizeof note, "C, %d producer(s) x %d partition(s), every offset checked",
                  producers, partitions);
    report(n, &c, !problem[0], note, partitions, producers);
    for (int t = 0; t < producers; t++) rd_kafka_destroy(shares[t].rk);
    return problem[0] ? 1 : 0;
}

/* ------------------------------------------------------------------ consume */

static int consume(const char *bootstrap, const char *topic, int partitions, long n, long pid,
                   int idle_seconds) {
    char group[300];
    snprintf(group, sizeof group, "bench-c-%s", topic);
    rd_kafka_t *rk = new_client(RD_KAFKA_CONSUMER, bootstrap, group);
    rd_kafka_poll_set_consumer(rk);
    warm(rk, topic);
    int64_t *next = calloc((size_t)partitions, sizeof(int64_t));
    long *want = calloc((size_t)partitions, sizeof(long));
    for (int p = 0; p < partitions; p++) want[p] = n / partitions + (p < n % partitions);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++) rd_kafka_topic_partition_list_add(parts, topic, p)->offset = 0;
    char problem[512] = "";
    long seen = 0;
    struct clock c;
    clock_start(&c, pid);
    rd_kafka_resp_err_t err = rd_kafka_assign(rk, parts);
    if (err) snprintf(problem, sizeof problem, "assign: %s", rd_kafka_err2str(err));
    double idle_since = now();
    while (!problem[0] && seen < n) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m) {
            if (now() - idle_since > idle_seconds)
                snprintf(problem, sizeof problem, "no records for %d s after %ld of %ld", idle_seconds,
                         seen, n);
            continue;
        }
        idle_since = now();
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                snprintf(problem, sizeof problem, "consume: %s", rd_kafka_message_errstr(m));
        } else if (m->partition < 0 || m->partition >= partitions) {
            snprintf(problem, sizeof problem, "a record from partition %d", m->partition);
        } else if (m->offset != next[m->partition]) {
            snprintf(problem, sizeof problem, "partition %d: offset %lld where %lld was expected",
                     m->partition, (long long)m->offset, (long long)next[m->partition]);
        } else if (m->len != VALUE_SIZE || memcmp(m->payload, VALUE, VALUE_SIZE) != 0) {
            snprintf(problem, sizeof problem, "partition %d offset %lld: value changed", m->partition,
                     (long long)m->offset);
        } else {
            next[m->partition]++;
            seen++;
        }
        rd_kafka_message_destroy(m);
    }
    clock_stop(&c);
    for (int p = 0; p < partitions && !problem[0]; p++)
        if (next[p] != want[p])
            snprintf(problem, sizeof problem, "partition %d gave %lld records, %ld expected", p,
                     (long long)next[p], want[p]);
    char note[512];
    if (problem[0]) snprintf(note, sizeof note, "%s", problem);
    else snprintf(note, sizeof note, "C, assign %d partition(s) from 0, every offset in order",
                  partitions);
    report(seen, &c, !problem[0], note, partitions, 1);
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return problem[0] ? 1 : 0;
}

static int check(int partitions, long n) {
    offsets = malloc(sizeof(int64_t) * (size_t)n);
    partition_of = malloc(sizeof(int32_t) * (size_t)n);
    for (long i = 0; i < n; i++) {
        long long offset;
        int partition;
        if (scanf("%d %lld", &partition, &offset) != 2) fail("check", "fewer lines than records");
        offsets[i] = offset;
        partition_of[i] = partition;
    }
    char problem[512] = "";
    check_deliveries(n, partitions, problem, sizeof problem);
    struct clock c = {0};
    report(n, &c, !problem[0], problem[0] ? problem : "every offset checked", partitions, 0);
    return problem[0] ? 1 : 0;
}

int main(int argc, char **argv) {
    for (int i = 0; i < VALUE_SIZE; i++) VALUE[i] = (unsigned char)((i * 131 + 17) % 251);
    if (argc == 8 && strcmp(argv[1], "produce") == 0) {
        int partitions = atoi(argv[4]), producers = atoi(argv[6]);
        long n = atol(argv[5]);
        if (partitions < 1 || producers < 1 || n < 1) fail("produce", "bad arguments");
        return produce(argv[2], argv[3], partitions, n, producers, atol(argv[7]));
    }
    if (argc == 8 && strcmp(argv[1], "consume") == 0) {
        int partitions = atoi(argv[4]);
        long n = atol(argv[5]);
        if (partitions < 1 || n < 1) fail("consume", "bad arguments");
        return consume(argv[2], argv[3], partitions, n, atol(argv[6]), atoi(argv[7]));
    }
    if (argc == 4 && strcmp(argv[1], "check") == 0) {
        int partitions = atoi(argv[2]);
        long n = atol(argv[3]);
        if (partitions < 1 || n < 1) fail("check", "bad arguments");
        return check(partitions, n);
    }
    fprintf(stderr,
            "usage: %s produce BOOTSTRAP TOPIC PARTITIONS COUNT PRODUCERS SERVER_PID\n"
            "       %s consume BOOTSTRAP TOPIC PARTITIONS COUNT SERVER_PID IDLE_SECONDS\n"
            "       %s check PARTITIONS COUNT\n",
            argv[0], argv[0], argv[0]);
    return 2;
}
