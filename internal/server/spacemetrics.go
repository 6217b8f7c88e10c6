package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tyrstore/tyr/internal/storage"
)

// RegisterSpace adds the node's disk space figures to m, read at each
// scrape: per keyspace tyr_keyspace_blobs, tyr_keyspace_logical_bytes (the
// bytes of the chunks this node holds), tyr_keyspace_disk_bytes and
// tyr_keyspace_reclaim_bytes (removed, not yet reclaimed); and
// tyr_free_bytes and tyr_min_free_bytes (the floor below which writes are
// refused). The logical figures read every blob record: a scrape costs
// time in proportion to the number of blobs.
func (m *Metrics) RegisterSpace(s *Service) {
	m.Registry.MustRegister(spaceCollector{s: s})
}

var (
	keyspaceBlobsDesc = prometheus.NewDesc("tyr_keyspace_blobs",
		"Blobs of the keyspace this node keeps a record of.", []string{"keyspace"}, nil)
	keyspaceLogicalDesc = prometheus.NewDesc("tyr_keyspace_logical_bytes",
		"Bytes of the chunks of the keyspace's blobs this node holds (newest versions, holes included).", []string{"keyspace"}, nil)
	keyspaceDiskDesc = prometheus.NewDesc("tyr_keyspace_disk_bytes",
		"Approximate bytes the keyspace's files take on this node's disk.", []string{"keyspace"}, nil)
	keyspaceReclaimDesc = prometheus.NewDesc("tyr_keyspace_reclaim_bytes",
		"Bytes this node removed from the keyspace whose space is not reclaimed yet.", []string{"keyspace"}, nil)
	freeBytesDesc = prometheus.NewDesc("tyr_free_bytes",
		"Bytes free on the file system holding the data directory.", nil, nil)
	minFreeBytesDesc = prometheus.NewDesc("tyr_min_free_bytes",
		"The free-space floor (--min-free): below it, writes are refused with a no-space error.", nil, nil)
)

type spaceCollector struct{ s *Service }

func (spaceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{keyspaceBlobsDesc, keyspaceLogicalDesc, keyspaceDiskDesc, keyspaceReclaimDesc,
		freeBytesDesc, minFreeBytesDesc} {
		ch <- d
	}
}

func (c spaceCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	c.s.engine.Each(func(ks *storage.Keyspace) {
		gauge(keyspaceDiskDesc, ks.DiskBytes(), ks.Name)
		if u, err := c.s.keyspaceUsage(ks); err == nil {
			gauge(keyspaceBlobsDesc, u.Blobs, ks.Name)
			gauge(keyspaceLogicalDesc, u.LogicalBytes, ks.Name)
			gauge(keyspaceReclaimDesc, u.ReclaimBytes, ks.Name)
		}
	})
	if free, err := c.s.engine.FreeBytes(); err == nil {
		gauge(freeBytesDesc, free)
	}
	gauge(minFreeBytesDesc, c.s.engine.MinFreeBytes())
}
