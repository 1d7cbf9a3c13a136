// Command sarama_check drives Debian's Shopify/sarama (1.22) against a broker for
// tests/kafka/test_go_client.py. Each subcommand prints one JSON document on stdout
// and exits non-zero with the client's error on stderr, so the Python test can
// compare what sarama says it did with what the broker stored.
//
// Sarama 1.22 does not negotiate per-API versions: config.Version decides them.
// V1_0_0_0 makes it write RecordBatch v2 (Produce v3) with headers, Fetch v4,
// Metadata v5, JoinGroup v1, OffsetFetch v1 and, once a retention is set,
// OffsetCommit v2.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

// Record is one message as sarama produced or consumed it.
type Record struct {
	Partition   int32             `json:"partition"`
	Offset      int64             `json:"offset"`
	Key         *string           `json:"key"`
	Value       *string           `json:"value"`
	Headers     [][2]string       `json:"headers"`
	TimestampMs int64             `json:"timestamp_ms"`
	Extra       map[string]string `json:"extra,omitempty"`
}

// config is sarama's configuration for the Kafka version it is told to speak (its
// request versions follow from it, not from ApiVersions).
func config(clientID, kafkaVersion string) (*sarama.Config, error) {
	version, err := sarama.ParseKafkaVersion(kafkaVersion)
	if err != nil {
		return nil, err
	}
	c := sarama.NewConfig()
	c.ClientID = clientID
	c.Version = version
	c.Net.DialTimeout = 10 * time.Second
	c.Metadata.Retry.Max = 5
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	return c, nil
}

// versionFlag is the -kafka-version every command takes; 1.0.0 by default.
func versionFlag(fs *flag.FlagSet) *string {
	return fs.String("kafka-version", "1.0.0", "the Kafka version sarama is configured for")
}

func optional(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

func fromMessage(m *sarama.ConsumerMessage) Record {
	headers := make([][2]string, 0, len(m.Headers))
	for _, h := range m.Headers {
		headers = append(headers, [2]string{string(h.Key), string(h.Value)})
	}
	ts := int64(-1)
	if !m.Timestamp.IsZero() {
		ts = m.Timestamp.UnixNano() / int64(time.Millisecond)
	}
	return Record{m.Partition, m.Offset, optional(m.Key), optional(m.Value), headers, ts, nil}
}

// produce sends count records with keys, two headers and a given CreateTime each,
// in one SendMessages call so they travel as one batch per partition.
func produce(args []string) (interface{}, error) {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	brokers := fs.String("brokers", "", "bootstrap address")
	topic := fs.String("topic", "", "topic")
	partitions := fs.Int("partitions", 1, "record i goes to partition i % partitions")
	count := fs.Int("count", 10, "records")
	prefix := fs.String("prefix", "v", "value prefix")
	baseMs := fs.Int64("timestamp-ms", 1700000000000, "CreateTime of record 0; record i gets +i s")
	codec := fs.String("codec", "none", "none, gzip, snappy or lz4")
	kafkaVersion := versionFlag(fs)
	withHeaders := fs.Bool("headers", true, "send two headers per record (Kafka 0.11+)")
	_ = fs.Parse(args)

	c, err := config("rustka-sarama-producer", *kafkaVersion)
	if err != nil {
		return nil, err
	}
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Producer.Return.Successes = true
	c.Producer.Retry.Max = 3
	c.Producer.Flush.Messages = *count
	c.Producer.Flush.Frequency = 50 * time.Millisecond
	codecs := map[string]sarama.CompressionCodec{
		"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
	}
	chosen, ok := codecs[*codec]
	if !ok {
		return nil, fmt.Errorf("unknown codec %q", *codec)
	}
	c.Producer.Compression = chosen

	producer, err := sarama.NewSyncProducer([]string{*brokers}, c)
	if err != nil {
		return nil, err
	}
	msgs := make([]*sarama.ProducerMessage, *count)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{
			Topic:     *topic,
			Partition: int32(i % *partitions),
			Key:       sarama.StringEncoder(fmt.Sprintf("key-%d", i)),
			Value:     sarama.StringEncoder(fmt.Sprintf("%s-%d", *prefix, i)),
			Headers: []sarama.RecordHeader{
				{Key: []byte("trace"), Value: []byte(fmt.Sprintf("t-%d", i))},
				{Key: []byte("empty"), Value: []byte{}},
			},
			Timestamp: time.Unix(0, (*baseMs+int64(i)*1000)*int64(time.Millisecond)),
		}
		if !*withHeaders {
			msgs[i].Headers = nil
		}
	}
	sendErr := producer.SendMessages(msgs)
	closeErr := producer.Close()
	if sendErr != nil {
		var perMessage sarama.ProducerErrors
		if errors.As(sendErr, &perMessage) && len(perMessage) > 0 {
			return nil, fmt.Errorf("%d of %d not delivered, first: %v", len(perMessage), len(msgs), perMessage[0].Err)
		}
		return nil, sendErr
	}
	if closeErr != nil {
		return nil, closeErr
	}
	out := make([]Record, len(msgs))
	for i, m := range msgs {
		out[i] = Record{Partition: m.Partition, Offset: m.Offset}
	}
	return out, nil
}

// read consumes count records of one partition from an offset, without a group.
func read(args []string) (interface{}, error) {
	fs := flag.NewFlagSet("read", flag.ExitOnError)
	brokers := fs.String("brokers", "", "bootstrap address")
	topic := fs.String("topic", "", "topic")
	partition := fs.Int("partition", 0, "partition")
	offset := fs.Int64("offset", 0, "first offset")
	count := fs.Int("count", 10, "records to read")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after")
	kafkaVersion := versionFlag(fs)
	_ = fs.Parse(args)

	c, err := config("rustka-sarama-reader", *kafkaVersion)
	if err != nil {
		return nil, err
	}
	consumer, err := sarama.NewConsumer([]string{*brokers}, c)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(*topic, int32(*partition), *offset)
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	out := []Record{}
	deadline := time.After(*timeout)
	for len(out) < *count {
		select {
		case m := <-pc.Messages():
			out = append(out, fromMessage(m))
		case e := <-pc.Errors():
			return nil, e
		case <-deadline:
			return nil, fmt.Errorf("read %d of %d records before the deadline", len(out), *count)
		}
	}
	return out, nil
}

// member consumes a topic in a group until it has seen count records, marks each
// one, and leaves; sarama commits the marks when the session ends.
type member struct {
	mu      sync.Mutex
	records []Record
	count   int
	done    context.CancelFunc
	claims  map[string][]int32
}

func (h *member) Setup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	h.claims = s.Claims()
	h.mu.Unlock()
	return nil
}

func (h *member) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *member) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.mu.Lock()
		r := fromMessage(m)
		r.Extra = map[string]string{"generation": fmt.Sprint(s.GenerationID())}
		h.records = append(h.records, r)
		enough := len(h.records) >= h.count
		h.mu.Unlock()
		s.MarkMessage(m, fmt.Sprintf("sarama-%d", m.Offset))
		if enough {
			h.done()
		}
	}
	return nil
}

func group(args []string) (interface{}, error) {
	fs := flag.NewFlagSet("group", flag.ExitOnError)
	brokers := fs.String("brokers", "", "bootstrap address")
	topic := fs.String("topic", "", "topic")
	groupID := fs.String("group", "", "group id")
	count := fs.Int("count", 10, "records to read before leaving")
	timeout := fs.Duration("timeout", 45*time.Second, "give up after")
	// Sarama 1.22's default, zero, makes it commit with OffsetCommit v1 (the version
	// Kafka 4.0 removed); any retention selects v2.
	retention := fs.Duration("retention", 0, "offset retention sarama asks for")
	kafkaVersion := versionFlag(fs)
	_ = fs.Parse(args)

	c, err := config("rustka-sarama-member", *kafkaVersion)
	if err != nil {
		return nil, err
	}
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.Retention = *retention
	c.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup([]string{*brokers}, *groupID, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	h := &member{count: *count, done: cancel}
	var groupErrs []string
	var errsMu sync.Mutex
	go func() {
		for e := range cg.Errors() {
			errsMu.Lock()
			groupErrs = append(groupErrs, e.Error())
			errsMu.Unlock()
		}
	}()
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, []string{*topic}, h); err != nil {
			_ = cg.Close()
			return nil, err
		}
	}
	closeErr := cg.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	errsMu.Lock()
	defer errsMu.Unlock()
	if len(h.records) < h.count {
		return nil, fmt.Errorf("read %d of %d records in time; group errors: %s",
			len(h.records), h.count, strings.Join(groupErrs, "; "))
	}
	if len(groupErrs) > 0 {
		return nil, fmt.Errorf("group errors: %s", strings.Join(groupErrs, "; "))
	}
	if closeErr != nil {
		return nil, closeErr
	}
	return map[string]interface{}{"records": h.records, "claims": h.claims}, nil
}

func main() {
	commands := map[string]func([]string) (interface{}, error){
		"produce": produce, "read": read, "group": group,
	}
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: sarama_check produce|read|group [flags]")
		os.Exit(2)
	}
	result, err := commands[os.Args[1]](os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sarama_check %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
