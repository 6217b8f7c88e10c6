package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tyrstore/tyr/internal/node"
)

// RegisterNode adds n's peer traffic counts to m:
// tyr_peer_messages_sent_total, tyr_peer_deliver_calls_total,
// tyr_peer_deliver_failures_total, tyr_peer_messages_dropped_total,
// tyr_peer_messages_received_total, tyr_wal_syncs_total,
// tyr_combined_commits_total, tyr_combined_requests_total and
// tyr_copy_commits_lost_total, read from
// n.Stats at each scrape.
func (m *Metrics) RegisterNode(n *node.Node) {
	m.Registry.MustRegister(nodeCollector{n: n})
}

var (
	peerMessagesSentDesc = prometheus.NewDesc("tyr_peer_messages_sent_total",
		"Chain messages this node sent to other nodes in Deliver calls, retransmissions included.", nil, nil)
	peerDeliverCallsDesc = prometheus.NewDesc("tyr_peer_deliver_calls_total",
		"Deliver calls this node made to other nodes; each carries a batch of messages for one node.", nil, nil)
	peerDeliverFailuresDesc = prometheus.NewDesc("tyr_peer_deliver_failures_total",
		"Deliver calls this node made that returned an error.", nil, nil)
	peerMessagesDroppedDesc = prometheus.NewDesc("tyr_peer_messages_dropped_total",
		"Chain messages this node dropped before sending: no address, no connection or a full queue.", nil, nil)
	peerForwardsCoalescedDesc = prometheus.NewDesc("tyr_peer_forwards_coalesced_total",
		"Chain Forwards this node did not send again because an earlier copy was still on its way to the same node.", nil, nil)
	peerMessagesReceivedDesc = prometheus.NewDesc("tyr_peer_messages_received_total",
		"Chain messages other nodes delivered to this node.", nil, nil)
	walSyncsDesc = prometheus.NewDesc("tyr_wal_syncs_total",
		"WAL syncs this node made to make commits durable: one per keyspace per group commit.", nil, nil)
	combinedCommitsDesc = prometheus.NewDesc("tyr_combined_commits_total",
		"Commits this node coordinated that combined several requests' blind ops on hot blobs.", nil, nil)
	combinedRequestsDesc = prometheus.NewDesc("tyr_combined_requests_total",
		"Requests the combined commits this node coordinated carried.", nil, nil)
	copyCommitsLostDesc = prometheus.NewDesc("tyr_copy_commits_lost_total",
		"Copies of a blob this node took without a commit that passed through it, every source having lost its stage of the commit in a restart.", nil, nil)
)

// nodeCollector reads a node's counts when metrics are scraped.
type nodeCollector struct{ n *node.Node }

func (nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{peerMessagesSentDesc, peerDeliverCallsDesc, peerDeliverFailuresDesc,
		peerMessagesDroppedDesc, peerForwardsCoalescedDesc, peerMessagesReceivedDesc, walSyncsDesc, combinedCommitsDesc, combinedRequestsDesc, copyCommitsLostDesc} {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Stats()
	for _, v := range []struct {
		d *prometheus.Desc
		n uint64
	}{
		{peerMessagesSentDesc, st.MessagesSent},
		{peerDeliverCallsDesc, st.DeliverCalls},
		{peerDeliverFailuresDesc, st.DeliverFailures},
		{peerMessagesDroppedDesc, st.MessagesDropped},
		{peerForwardsCoalescedDesc, st.ForwardsCoalesced},
		{peerMessagesReceivedDesc, st.MessagesReceived},
		{walSyncsDesc, st.Syncs},
		{combinedCommitsDesc, st.CombinedCommits},
		{combinedRequestsDesc, st.CombinedRequests},
		{copyCommitsLostDesc, st.CopiesLost},
	} {
		ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n))
	}
}
