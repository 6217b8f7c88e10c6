// Package chain commits a transaction along a chain of replicas, the
// coordinator-free protocol of Týr (after Warp): the members are the servers
// holding replicas of the written blobs, sorted in one global order with the
// blobs' version managers first. The forward pass prepares (validates and
// stages) the transaction on each member in order; the backward pass commits
// it from the tail back to the head, so that when the head acknowledges,
// every member holds it durably. A failure in the forward pass aborts the
// members already prepared, walking back.
//
// This package has no goroutines and performs no I/O of its own; members do
// their storage work when called. On a single node the chain has one member.
package chain

import (
	"errors"
	"fmt"

	"github.com/tyrstore/tyr/internal/txn"
)

// Member is one server of a chain.
type Member interface {
	// Prepare validates ops against the member's state and stages them,
	// holding whatever it needs so Commit cannot fail for a logical reason.
	Prepare(ops []txn.Op) (Prepared, error)
}

// Prepared is a transaction staged on one member. Exactly one of Commit or
// Abort is called.
type Prepared interface {
	// Commit makes the staged ops durable and visible.
	Commit() error
	// Abort drops the staged ops.
	Abort()
	// Results reports each op's outcome on this member.
	Results() []txn.Result
}

// ErrNoMembers is returned for an empty chain.
var ErrNoMembers = errors.New("chain: no members")

// Commit runs ops through members: forward pass, then backward pass. It
// returns the head's results. On a forward-pass error, nothing is committed
// anywhere.
func Commit(members []Member, ops []txn.Op) ([]txn.Result, error) {
	if len(members) == 0 {
		return nil, ErrNoMembers
	}
	prepared := make([]Prepared, 0, len(members))
	for i, m := range members {
		p, err := m.Prepare(ops)
		if err != nil {
			for j := len(prepared) - 1; j >= 0; j-- {
				prepared[j].Abort()
			}
			if i == 0 {
				return nil, err
			}
			return nil, fmt.Errorf("chain member %d: %w", i, err)
		}
		prepared = append(prepared, p)
	}
	for i := len(prepared) - 1; i >= 0; i-- {
		if err := prepared[i].Commit(); err != nil {
			// A member that fails to commit after preparing has lost its
			// storage; the members before it still commit (its replica is
			// repaired from them), and the error is reported.
			for j := i - 1; j >= 0; j-- {
				err = errors.Join(err, prepared[j].Commit())
			}
			return nil, err
		}
	}
	return prepared[0].Results(), nil
}
