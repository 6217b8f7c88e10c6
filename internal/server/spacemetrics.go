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
// refused); the shared block cache's tyr_block_cache_bytes (capacity),
// tyr_block_cache_used_bytes, tyr_block_cache_hits_total and
// tyr_block_cache_misses_total. The logical figures read every blob record: a scrape costs
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
	blockCacheDesc = prometheus.NewDesc("tyr_block_cache_bytes",
		"Capacity of the block cache the keyspaces share (--block-cache).", nil, nil)
	blockCacheUsedDesc = prometheus.NewDesc("tyr_block_cache_used_bytes",
		"Bytes the shared block cache holds.", nil, nil)
	blockCacheHitsDesc = prometheus.NewDesc("tyr_block_cache_hits_total",
		"Block reads the shared block cache answered.", nil, nil)
	blockCacheMissesDesc = prometheus.NewDesc("tyr_block_cache_misses_total",
		"Block reads the shared block cache missed, read from files.", nil, nil)
)

type spaceCollector struct{ s *Service }

func (spaceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{keyspaceBlobsDesc, keyspaceLogicalDesc, keyspaceDiskDesc, keyspaceReclaimDesc,
		freeBytesDesc, minFreeBytesDesc, blockCacheDesc, blockCacheUsedDesc, blockCacheHitsDesc, blockCacheMissesDesc} {
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
	bc := c.s.engine.BlockCache()
	gauge(blockCacheDesc, uint64(bc.CapacityBytes))
	gauge(blockCacheUsedDesc, uint64(bc.UsedBytes))
	ch <- prometheus.MustNewConstMetric(blockCacheHitsDesc, prometheus.CounterValue, float64(bc.Hits))
	ch <- prometheus.MustNewConstMetric(blockCacheMissesDesc, prometheus.CounterValue, float64(bc.Misses))
}
