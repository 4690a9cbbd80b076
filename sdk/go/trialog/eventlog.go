package trialog

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// eventLog is what the actor service and the environment service share in reading and
// writing the events topic (docs/protocol.md, "Consuming and committing"): the consumer
// group, each partition's catch-up (what the service would write is set aside until the
// log shows it or catch-up ends), the safe points committed, dead letters and the flush.
type eventLog struct {
	prefix     string // the deployment's topic prefix
	events     string
	group      string // the consumer group; "" for a seat, which reads every partition from the start and commits nothing
	service    string // names the service in its dead letters
	store      *Store
	client     *kgo.Client
	parts      map[int32]*partState
	out        []*kgo.Record // written with the next flush
	log        *log.Logger
	lastCommit time.Time
	svc        logService
}

// logService is what the event log asks of the service reading it.
type logService interface {
	handle(r *kgo.Record, h map[string]string, trialID string)
	safePoint(p int32, position int64) int64 // the start of p's oldest live trial, else position
	forget(p int32)                          // p is no longer ours: its trials are dropped
	caughtUp(p int32, sent int)              // p went live, writing sent events the previous owner did not
}

type partState struct {
	end      int64 // the end offset when assigned: catching up until the position reaches it
	position int64
	live     bool
	pending  map[string]*kgo.Record // what catch-up would send, by event identity
	order    []string
}

// newPart is a partition catching up to end; an empty one is live at once.
func newPart(end int64) *partState {
	return &partState{end: end, live: end == 0, pending: map[string]*kgo.Record{}}
}

func newEventLog(prefix, group, service string, store *Store, logger *log.Logger, svc logService) eventLog {
	if logger == nil {
		logger = log.Default()
	}
	return eventLog{prefix: prefix, events: prefix + "events", group: group, service: service, store: store,
		parts: map[int32]*partState{}, log: logger, svc: svc}
}

// connect makes the client: the events topic from the start for a new group (or a seat),
// events written to the partition set on the record, and with a group, the partitions'
// catch-up and safe points on each assignment change.
func (l *eventLog) connect(brokers []string, fetchMaxWait time.Duration, extra []kgo.Opt) error {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(l.events),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a new group (or a seat) reads the whole log
		kgo.RecordPartitioner(partitioner{events: l.events}),
		kgo.FetchMaxWait(fetchMaxWait),
		// The producer keeps franz-go's defaults: idempotent, acks=all, snappy compression.
	}
	if l.group != "" {
		opts = append(opts,
			kgo.ConsumerGroup(l.group),
			kgo.SessionTimeout(10*time.Second), // a dead instance's trials move on within seconds
			kgo.HeartbeatInterval(time.Second),
			kgo.RebalanceTimeout(10*time.Second),
			kgo.DisableAutoCommit(),    // we commit the safe point, not what was read
			kgo.BlockRebalanceOnPoll(), // assignments change between polls only
			kgo.OnPartitionsAssigned(l.assigned),
			kgo.OnPartitionsRevoked(l.revoked),
			kgo.OnPartitionsLost(l.lost),
		)
	}
	client, err := kgo.NewClient(append(opts, extra...)...)
	l.client = client
	return err
}

// serve polls, handles and flushes until ctx is cancelled, committing the safe points
// every second and at the end. With pollFor, each poll waits that long at the most and
// between returns afterPoll runs.
func (l *eventLog) serve(ctx context.Context, pollFor time.Duration, afterPoll func()) {
	for ctx.Err() == nil {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if pollFor > 0 {
			pollCtx, cancel = context.WithTimeout(ctx, pollFor)
		}
		fetches := l.client.PollRecords(pollCtx, 256)
		cancel()
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				l.log.Printf("trialog: fetch %s[%d]: %v", t, p, err)
			}
		})
		fetches.EachRecord(l.process)
		if afterPoll != nil {
			afterPoll()
		}
		if err := l.flush(ctx); err != nil && ctx.Err() == nil {
			l.log.Printf("trialog: produce failed (the next owner redoes the work): %v", err)
		}
		if time.Since(l.lastCommit) > time.Second {
			l.commit(ctx, nil)
		}
		l.client.AllowRebalance()
	}
	l.commit(context.Background(), nil)
}

// --- partitions: catch-up and safe points ---

// endOffsets lists the end offset of each partition of the events topic.
func (l *eventLog) endOffsets(ctx context.Context, cl *kgo.Client) (kadm.ListedOffsets, error) {
	return kadm.NewClient(cl).ListEndOffsets(ctx, l.events)
}

func (l *eventLog) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	ends, err := l.endOffsets(ctx, cl)
	for _, p := range assigned[l.events] {
		end := int64(0)
		if err == nil {
			if o, ok := ends.Lookup(l.events, p); ok {
				end = o.Offset
			}
		}
		l.parts[p] = newPart(end)
		l.log.Printf("trialog: partition %d assigned; catching up to offset %d", p, end)
	}
}

func (l *eventLog) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	l.commit(ctx, revoked[l.events])
	l.lost(ctx, nil, revoked)
}

func (l *eventLog) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	for _, p := range lost[l.events] {
		delete(l.parts, p)
		l.svc.forget(p)
	}
}

// commit writes, per live partition, the safe point: the start of its oldest live
// trial, else the position. With only, just those partitions.
func (l *eventLog) commit(ctx context.Context, only []int32) {
	if l.group == "" {
		return // a seat has no group: it rebuilds from the start of the log
	}
	offsets := map[int32]kgo.EpochOffset{}
	for p, part := range l.parts {
		if !part.live || (only != nil && !contains(only, p)) {
			continue
		}
		offsets[p] = kgo.EpochOffset{Epoch: -1, Offset: l.svc.safePoint(p, part.position)}
	}
	l.lastCommit = time.Now()
	if len(offsets) == 0 || len(l.out) > 0 {
		return // outputs not yet acknowledged: committing now could lose them in a crash
	}
	l.client.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{l.events: offsets}, nil)
}

func contains(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// placed is a trial as the event log sees it: where it started.
type placed interface {
	place() (partition int32, startOffset int64)
}

// safePointOf is the start of the oldest of trials on partition p, else position.
func safePointOf[T placed](trials map[string]T, p int32, position int64) int64 {
	safe := position
	for _, t := range trials {
		if part, start := t.place(); part == p && start < safe {
			safe = start
		}
	}
	return safe
}

// forgetOn drops the trials of partition p.
func forgetOn[T placed](trials map[string]T, p int32) {
	for id, t := range trials {
		if part, _ := t.place(); part == p {
			delete(trials, id)
		}
	}
}

// --- records ---

func (l *eventLog) process(r *kgo.Record) {
	part := l.parts[r.Partition]
	if part == nil {
		return
	}
	h := headers(r)
	trialID := string(r.Key)
	if !part.live && len(part.pending) > 0 {
		delete(part.pending, identity(trialID, h)) // the log already holds it: never send it again
	}
	l.svc.handle(r, h, trialID)
	part.position = r.Offset + 1
	if !part.live && part.position >= part.end {
		l.goLive(r.Partition, part)
	}
}

func (l *eventLog) goLive(p int32, part *partState) {
	part.live = true
	sent := 0
	for _, id := range part.order {
		if rec, ok := part.pending[id]; ok {
			l.out = append(l.out, rec)
			sent++
		}
	}
	part.pending, part.order = map[string]*kgo.Record{}, nil
	l.svc.caughtUp(p, sent)
}

// --- writing ---

// write sends an event record with the flush after this batch — or, while its partition
// catches up, sets it aside until the log shows it or catch-up ends.
func (l *eventLog) write(rec *kgo.Record, trialID string) {
	part := l.parts[rec.Partition]
	if part != nil && !part.live {
		key := identity(trialID, headers(rec))
		if _, dup := part.pending[key]; !dup {
			part.pending[key] = rec
			part.order = append(part.order, key)
		}
		return
	}
	l.out = append(l.out, rec)
}

// deadLetter writes r to the dead letters with reason — once: not while its partition
// catches up, for it was judged when first read.
func (l *eventLog) deadLetter(r *kgo.Record, reason string) {
	if part := l.parts[r.Partition]; part == nil || !part.live {
		return
	}
	hs := map[string][]byte{}
	for _, h := range r.Headers {
		hs[h.Key] = h.Value
	}
	key, value := r.Key, r.Value
	letter := DeadLetter{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: &key, Value: &value, Headers: hs, Reason: reason, Service: l.service, TimestampMs: r.Timestamp.UnixMilli()}
	sch, _ := l.store.ByName("trialog.DeadLetter")
	encoded, err := Encode(sch, &letter)
	if err != nil {
		l.log.Printf("trialog: cannot write a dead letter: %v", err)
		return
	}
	l.log.Printf("trialog: dead letter: %s", reason)
	l.out = append(l.out, &kgo.Record{Topic: l.prefix + "dead-letters", Key: r.Key, Value: encoded,
		Headers: []kgo.RecordHeader{{Key: HeaderKind, Value: []byte("dead-letter")}, {Key: HeaderSchema, Value: []byte("trialog.DeadLetter")}}})
}

func (l *eventLog) flush(ctx context.Context) error {
	if len(l.out) == 0 {
		return nil
	}
	out := l.out
	l.out = nil
	return l.client.ProduceSync(ctx, out...).FirstErr()
}

// encodeEvent encodes value with the named schema as an event record of trialID on partition.
func (l *eventLog) encodeEvent(partition int32, kind, schema string, tick int64, sender, receiver, id, trialID string, value any) (*kgo.Record, error) {
	sch, ok := l.store.ByName(schema)
	if !ok {
		return nil, fmt.Errorf("schema %s missing from the store", schema)
	}
	encoded, err := Encode(sch, value)
	if err != nil {
		return nil, err
	}
	rec := &kgo.Record{Topic: l.events, Partition: partition, Key: []byte(trialID), Value: encoded, Headers: eventHeaders(kind, tick, sender, receiver, schema, id)}
	if o, ok := value.(*Observation); ok && o.Reward != nil {
		// Readers refuse an observation whose reward header and body disagree.
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderReward, Value: []byte("1")})
	}
	return rec, nil
}

// partitioner writes events to the partition the trial was read from (set on the
// record) and everything else by key, as Kafka's default partitioner does (murmur2).
type partitioner struct{ events string }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.events {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return kgo.StickyKeyPartitioner(nil).ForTopic(topic)
}
