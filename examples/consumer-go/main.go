// SPDX-License-Identifier: Apache-2.0

// consumer-go: an example consumer of roomd's outbox stream in Go, the contract of
// docs/consumers.md in about 200 lines. It reads the stream <namespace>hyapp_room_outbox
// through a durable pull consumer, decodes each message's roomd.v1.RoomOutboxEvent and its
// payload (the message named by event_type, from proto/room_events.proto through a
// descriptor set: no generated code), and applies each event once, in its room's order:
//
//   - dedupe by event_id (= the Nats-Msg-Id header): an event seen before is acknowledged
//     and has no effect (redeliveries, a reset cursor, a restart before the ack);
//   - order by room_seq: an event whose room_seq is beyond the room's mark + 1 is held
//     (NakWithDelay 250 ms) for up to 8 deliveries, then applied anyway;
//   - the effect and the dedupe state are one write: a JSON line appended to -out, which is
//     read back at start (a real consumer commits its effect and the event_id in one
//     transaction of its own database);
//   - then AckSync. A message that does not decode is a poison: Term (a real consumer
//     would first publish it to its dead-letter subject).
//
// Built with Debian's Go packages (GOPATH mode, no module download): see Makefile.
// -crash-after N exits (status 3) after the Nth effect before its ack: a crash between
// effect and ack, which JetStream answers with a redelivery after -ack-wait.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// effect is one applied event: a line of -out.
type effect struct {
	EventID     string          `json:"event_id"`
	AppCode     string          `json:"app_code"`
	RoomID      string          `json:"room_id"`
	RoomSeq     int64           `json:"room_seq"`
	RoomVersion int64           `json:"room_version"`
	EventType   string          `json:"event_type"`
	Payload     json.RawMessage `json:"payload"`
	Deliveries  uint64          `json:"deliveries"`
}

type consumer struct {
	files      *protoregistry.Files
	envelope   protoreflect.MessageDescriptor
	out        *os.File
	seen       map[string]bool
	marks      map[string]int64 // "app_code/room_id" -> highest room_seq applied
	effects    int
	crashAfter int
}

func main() {
	url := flag.String("url", "nats://127.0.0.1:4222", "NATS URL (rocketmq.name_servers)")
	ns := flag.String("namespace", "", "roomd's rocketmq.namespace")
	durable := flag.String("durable", "example-go", "the consumer group: the durable consumer's name")
	out := flag.String("out", "effects.jsonl", "the effects and dedupe state (JSON lines)")
	protoSet := flag.String("proto-set", "room_events.pb", "descriptor set of proto/room_events.proto")
	ackWait := flag.Duration("ack-wait", 30*time.Second, "redelivery after this without an ack")
	crashAfter := flag.Int("crash-after", 0, "exit after the Nth effect, before its ack (tests)")
	flag.Parse()

	c := &consumer{seen: map[string]bool{}, marks: map[string]int64{}, crashAfter: *crashAfter}
	if err := c.loadProto(*protoSet); err != nil {
		log.Fatalf("proto: %v", err)
	}
	if err := c.loadState(*out); err != nil {
		log.Fatalf("state: %v", err)
	}
	nc, err := nats.Connect(*url, nats.MaxReconnects(-1), nats.Name(*durable))
	if err != nil {
		log.Fatalf("connect %s: %v", *url, err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		log.Fatalf("jetstream: %v", err)
	}
	// the stream name: namespace + topic, characters outside [A-Za-z0-9_-] as "_" (docs/bus.md)
	stream := regexp.MustCompile(`[^A-Za-z0-9_-]`).ReplaceAllString(*ns+"hyapp_room_outbox", "_")
	sub, err := js.PullSubscribe(*ns+"hyapp_room_outbox.*", *durable, nats.BindStream(stream),
		nats.ManualAck(), nats.AckExplicit(), nats.AckWait(*ackWait), nats.DeliverAll())
	if err != nil {
		log.Fatalf("subscribe %s: %v", stream, err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	log.Printf("consuming %s as %s (%d events applied before)", stream, *durable, len(c.seen))
	for {
		select {
		case <-stop:
			return
		default:
		}
		msgs, err := sub.Fetch(16, nats.MaxWait(time.Second))
		if err != nil {
			continue // a timeout: no messages; a disconnect: nats.go reconnects
		}
		for _, m := range msgs {
			c.handle(m)
		}
	}
}

func (c *consumer) loadProto(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		return err
	}
	if c.files, err = protodesc.NewFiles(&set); err != nil {
		return err
	}
	d, err := c.files.FindDescriptorByName("roomd.v1.RoomOutboxEvent")
	if err != nil {
		return err
	}
	c.envelope = d.(protoreflect.MessageDescriptor)
	return nil
}

func (c *consumer) loadState(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.out = f
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e effect
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // a line torn by a crash: its event was not acknowledged, it comes again
		}
		c.seen[e.EventID] = true
		if key := e.AppCode + "/" + e.RoomID; e.RoomSeq > c.marks[key] {
			c.marks[key] = e.RoomSeq
		}
	}
	return sc.Err()
}

func (c *consumer) handle(m *nats.Msg) {
	meta, _ := m.Metadata()
	var deliveries uint64 = 1
	if meta != nil {
		deliveries = meta.NumDelivered
	}
	ev := dynamicpb.NewMessage(c.envelope)
	if err := proto.Unmarshal(m.Data, ev); err != nil {
		log.Printf("poison message on %s: %v", m.Subject, err)
		_ = m.Term()
		return
	}
	get := func(name string) protoreflect.Value {
		return ev.Get(c.envelope.Fields().ByName(protoreflect.Name(name)))
	}
	e := effect{EventID: get("event_id").String(), AppCode: get("app_code").String(),
		RoomID: get("room_id").String(), RoomSeq: get("room_seq").Int(),
		RoomVersion: get("room_version").Int(), EventType: get("event_type").String(),
		Deliveries: deliveries}
	if id := m.Header.Get("Nats-Msg-Id"); id != "" && id != e.EventID {
		log.Printf("Nats-Msg-Id %s is not the event_id %s", id, e.EventID)
	}
	if c.seen[e.EventID] {
		_ = m.AckSync() // a duplicate: done before, no second effect
		return
	}
	key := e.AppCode + "/" + e.RoomID
	if e.RoomSeq > c.marks[key]+1 && deliveries < 8 {
		_ = m.NakWithDelay(250 * time.Millisecond) // an earlier event of the room first
		return
	}
	e.Payload = c.payload(e.EventType, get("payload").Bytes())
	line, _ := json.Marshal(e)
	if _, err := c.out.Write(append(line, '\n')); err != nil {
		log.Printf("effect %s: %v", e.EventID, err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	c.seen[e.EventID] = true
	if e.RoomSeq > c.marks[key] {
		c.marks[key] = e.RoomSeq
	}
	c.effects++
	if c.crashAfter > 0 && c.effects == c.crashAfter {
		fmt.Fprintf(os.Stderr, "crash after %d effects, before the ack of %s\n", c.effects, e.EventID)
		os.Exit(3)
	}
	_ = m.AckSync()
}

// payload decodes the packed message named by eventType ("RoomGiftSent" ->
// roomd.v1.RoomGiftSent) as JSON; an event type this build does not know stays
// {"unknown_type": true} (new types are added, never renumbered: skip or store them).
func (c *consumer) payload(eventType string, raw []byte) json.RawMessage {
	d, err := c.files.FindDescriptorByName(protoreflect.FullName("roomd.v1." + eventType))
	md, ok := d.(protoreflect.MessageDescriptor)
	if err != nil || !ok {
		return json.RawMessage(`{"unknown_type":true}`)
	}
	msg := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(raw, msg); err != nil {
		return json.RawMessage(`{"undecodable":true}`)
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(msg)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return js
}
