package mention

import (
	"errors"
	"slices"
	"time"
)

// handOver gives the room's ready reports to Config.Report (handRound):
// with retry, those that are not waiting for a retry round, and one that
// fails for now waits for one; without (the tracker is closing), every
// report, once.
func (r *room) handOver(retry bool) { r.handRound(!retry, retry) }

// handRound offers the room's ready reports (all of them, or those that
// are not waiting) to Config.Report, one round per room at a time. The
// order rule: oldest first, each report once a round, none waiting for
// another's answer. A report Report takes leaves the journal. One it
// refuses for good (refusedForGood: the notifications cannot carry it) is
// dropped, counted and logged, and leaves the journal too: offered again
// it would fail again. One that fails for now stays in the journal and
// waits; if retry is set, every waiting report is offered again in a
// round after a backoff (1 s, doubling while rounds fail, up to a minute;
// from 1 s again once none waits). A new report is offered at once, not
// behind the waiting ones: one author's report never holds up another's
// for more than the round they share, though it may overtake an older
// one. A notification queue that is away costs one call per new report,
// and one per waiting report a backoff.
func (r *room) handRound(all, retry bool) {
	r.roundMu.Lock()
	defer r.roundMu.Unlock()
	t := r.t
	r.mu.Lock()
	offer := make([]*Report, 0, len(r.ready))
	for _, m := range r.ready {
		if all || !r.waiting[m] {
			offer = append(offer, m)
		}
	}
	r.mu.Unlock()
	failed := 0
	var lastErr error
	for _, m := range offer {
		err := t.cfg.Report(*m)
		gone := err == nil || refusedForGood(err)
		switch {
		case err == nil:
			t.handed.Inc()
		case gone:
			t.dropped.Inc()
			t.log.Warn("dropping a mention report the notifications refuse for good", "document", r.id,
				"actor", m.Actor, "users", len(m.Users), "err", err)
		default:
			t.failed.Inc()
			failed++
			lastErr = err
		}
		r.mu.Lock()
		if gone {
			if i := slices.Index(r.ready, m); i >= 0 {
				r.ready = slices.Delete(r.ready, i, i+1)
				r.journalChanged()
			}
			delete(r.waiting, m)
		} else {
			r.waiting[m] = true
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	if failed == 0 {
		if len(r.waiting) == 0 {
			r.backoff = 0
		}
		r.mu.Unlock()
		return
	}
	r.backoff = min(max(2*r.backoff, time.Second), time.Minute)
	if retry && !r.retrying {
		r.retrying = true
		t.goAfter(r.backoff, func() {
			r.mu.Lock()
			r.retrying = false
			r.mu.Unlock()
			r.handRound(true, true)
		})
	}
	wait := r.backoff
	r.mu.Unlock()
	t.log.Warn("handing over mentions; they stay in the journal", "document", r.id,
		"reports", failed, "retry_in", wait, "err", lastErr)
}

// refusedForGood reports whether Config.Report refused a report for good:
// its error, or one it wraps, has a method Permanent() bool that says so
// (the notification service's ErrBadEvent does).
func refusedForGood(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}
