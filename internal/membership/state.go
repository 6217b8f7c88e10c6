package membership

import (
	"fmt"
)

// The two things this package sends through memberlist besides its
// metadata: broadcast messages (small, over UDP gossip) and the full state
// exchanged in push/pull (over TCP). Both are append-only; see codec.go.

// Message kinds: the first byte of every broadcast. Append-only: a kind
// number is never reused. A node ignores kinds it does not know, so new
// kinds can be added without breaking older nodes.
const (
	// messageCatalogEntry carries one catalog entry (CatalogEntry.encodeTo).
	messageCatalogEntry byte = 1
	// messageUser carries a caller's payload (Node.Broadcast), passed to
	// Config.OnMessage as is.
	messageUser byte = 2
)

// BroadcastBytesMax is the largest payload Node.Broadcast takes. A broadcast
// rides in a UDP gossip packet of at most 1400 bytes (memberlist's
// UDPBufferSize) shared with memberlist's own messages, so it must stay well
// below that to be sent promptly.
const BroadcastBytesMax = 1024

// Compile-time relation: the largest catalog entry is a valid broadcast.
const _ uint = BroadcastBytesMax - catalogEntryBytesMaxV1

// stateFormatV1 is the first push/pull state format. Append-only: later
// formats add sections after the catalog.
const stateFormatV1 = 1

// memberRecordFormatV1 is the first format of a member record inside the
// state.
const memberRecordFormatV1 = 1

// recordGrowthBytes is the room a decoder leaves in each record for fields
// appended by later formats.
const recordGrowthBytes = 64

// memberRecordBytesMax bounds one member record: format byte, meta with its
// 2-byte length prefix, state byte, gossip address with its prefix, and
// room to grow.
const memberRecordBytesMax = 1 + (2 + MetaBytesMax) + 1 + (2 + GossipAddrBytesMax) + recordGrowthBytes

// catalogRecordBytesMax bounds one catalog entry record.
const catalogRecordBytesMax = catalogEntryBytesMaxV1 + recordGrowthBytes

// stateBytesMax bounds the whole push/pull state: format byte, two counts
// (3-byte varints), and every record with its 2-byte length prefix.
const stateBytesMax = 1 + 3 + MembersMax*(2+memberRecordBytesMax) + 3 + CatalogEntriesHardMax*(2+catalogRecordBytesMax)

// pushPullBytesMax is memberlist's limit on the user state of one push/pull
// (maxPushStateBytes in its net.go, 20 MiB): larger states are refused by
// the receiver, which would stop anti-entropy altogether.
const pushPullBytesMax = 20 << 20

// Compile-time relation: the largest state is accepted by memberlist.
const _ uint = pushPullBytesMax - stateBytesMax

// encodeState returns the push/pull state of a node, format 1:
//
//	byte     format (1)
//	uvarint  member count
//	bytes    member record, per member:
//	           byte    format (1)
//	           bytes   meta (Meta.Encode)
//	           byte    state
//	           string  gossip address
//	uvarint  catalog entry count
//	bytes    catalog entry, per entry (CatalogEntry.encodeTo)
func encodeState(members []Member, entries []CatalogEntry) []byte {
	e := encoder{buf: make([]byte, 0, 64*(len(members)+len(entries))+16)}
	e.byte(stateFormatV1)
	e.uvarint(uint64(len(members)))
	var record encoder
	for _, m := range members {
		record.buf = record.buf[:0]
		record.byte(memberRecordFormatV1)
		var meta encoder
		m.Meta.encodeTo(&meta)
		record.bytes(meta.buf)
		record.byte(byte(m.State))
		record.string(m.GossipAddr)
		e.bytes(record.buf)
	}
	e.uvarint(uint64(len(entries)))
	for _, c := range entries {
		record.buf = record.buf[:0]
		c.encodeTo(&record)
		e.bytes(record.buf)
	}
	return e.buf
}

// decodeState decodes and validates a push/pull state. Any malformed or
// invalid record fails the whole state, so that bad input changes nothing.
func decodeState(b []byte) ([]Member, []CatalogEntry, error) {
	if len(b) > stateBytesMax {
		return nil, nil, fmt.Errorf("membership: %w: push/pull state is %d bytes, more than the limit of %d",
			ErrMalformed, len(b), stateBytesMax)
	}
	d := decoder{buf: b, what: "push/pull state"}
	d.formatByte()
	members := make([]Member, d.count("members", MembersMax))
	for i := range members {
		record := d.bytes("member record", memberRecordBytesMax)
		if d.err != nil {
			return nil, nil, d.err
		}
		m, err := decodeMember(record)
		if err != nil {
			return nil, nil, fmt.Errorf("member %d: %w", i, err)
		}
		members[i] = m
	}
	entries := make([]CatalogEntry, d.count("catalog entries", CatalogEntriesHardMax))
	for i := range entries {
		record := d.bytes("catalog entry", catalogRecordBytesMax)
		if d.err != nil {
			return nil, nil, d.err
		}
		c, err := decodeCatalogEntry(record)
		if err != nil {
			return nil, nil, fmt.Errorf("catalog entry %d: %w", i, err)
		}
		entries[i] = c
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return members, entries, nil
}

// decodeMember decodes and validates one member record.
func decodeMember(b []byte) (Member, error) {
	d := decoder{buf: b, what: "member record"}
	d.formatByte()
	metaBytes := d.bytes("meta", MetaBytesMax)
	state := State(d.byte())
	gossipAddr := d.string("gossip address", GossipAddrBytesMax)
	if d.err != nil {
		return Member{}, d.err
	}
	if state < StateAlive || state >= stateEnd {
		return Member{}, fmt.Errorf("membership: %w: member record: state %d", ErrMalformed, uint8(state))
	}
	meta, err := DecodeMeta(metaBytes)
	if err != nil {
		return Member{}, err
	}
	return Member{Meta: meta, State: state, GossipAddr: gossipAddr}, nil
}

// encodeCatalogMessage returns the broadcast carrying e.
func encodeCatalogMessage(e CatalogEntry) []byte {
	enc := encoder{buf: make([]byte, 0, 64+len(e.Config))}
	enc.byte(messageCatalogEntry)
	e.encodeTo(&enc)
	return enc.buf
}

// encodeUserMessage returns the broadcast carrying a caller's payload.
func encodeUserMessage(payload []byte) []byte {
	out := make([]byte, 0, 1+len(payload))
	out = append(out, messageUser)
	return append(out, payload...)
}
