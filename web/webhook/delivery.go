package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/riverqueue/river"
)

// deliveryKind is the River kind of a delivery: one event to one endpoint.
const deliveryKind = "tandem_webhook_delivery"

// maxAttempts lets RetryFor, not a count, end a delivery's retries.
const maxAttempts = 10_000

// deliveryArgs is one delivery. The body is kept as the text sent, byte
// for byte, so that every attempt signs and sends the same body.
type deliveryArgs struct {
	Endpoint string `json:"endpoint"` // the endpoint's key
	ID       string `json:"id"`       // the event's id (webhook-id), the same on every attempt
	Type     string `json:"type"`
	Body     string `json:"body"`
}

func (deliveryArgs) Kind() string { return deliveryKind }

type deliveryWorker struct {
	river.WorkerDefaults[deliveryArgs]
	h *Hooks
}

// Timeout lets River cancel an attempt a little after the request's own
// timeout.
func (w *deliveryWorker) Timeout(*river.Job[deliveryArgs]) time.Duration {
	return w.h.cfg.Timeout + 5*time.Second
}

// NextRetry waits backoff after the attempt that failed, give or take a
// tenth, so that the deliveries of one outage do not all come back at
// the same instant.
func (w *deliveryWorker) NextRetry(job *river.Job[deliveryArgs]) time.Time {
	d := backoff(job.Attempt, w.h.cfg.MinBackoff, w.h.cfg.MaxBackoff)
	jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(d))
	return time.Now().Add(d + jitter)
}

// backoff is the wait after the attempt-th attempt failed: min, doubling
// with each attempt, at most max.
func backoff(attempt int, min, max time.Duration) time.Duration {
	d := min
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

func (w *deliveryWorker) Work(ctx context.Context, job *river.Job[deliveryArgs]) error {
	h := w.h
	ep := h.byKey[job.Args.Endpoint]
	if ep == nil {
		h.m.deliveries.WithLabelValues(job.Args.Endpoint, "cancelled").Inc()
		return river.JobCancel(fmt.Errorf("%w: %s", ErrEndpointGone, job.Args.Endpoint))
	}
	if job.Attempt > 1 {
		h.m.retries.WithLabelValues(ep.key).Inc()
	}
	err := h.post(ctx, ep, job.Args.ID, []byte(job.Args.Body))
	if err == nil {
		h.m.deliveries.WithLabelValues(ep.key, "ok").Inc()
		h.release(ep)
		return nil
	}
	if time.Since(job.CreatedAt) >= h.cfg.RetryFor {
		h.m.deliveries.WithLabelValues(ep.key, "expired").Inc()
		h.release(ep)
		h.log.Error("webhook: giving up a delivery", "endpoint", ep.url, "event", job.Args.ID, "type", job.Args.Type,
			"attempts", job.Attempt, "err", err)
		return river.JobCancel(fmt.Errorf("%w after %d attempts: %w", ErrExpired, job.Attempt, err))
	}
	h.m.deliveries.WithLabelValues(ep.key, "failed").Inc()
	return err
}

// post sends one delivery, signed now, and reads at most
// maxResponseBytes of the answer.
func (h *Hooks) post(ctx context.Context, ep *endpoint, id string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	setHeaders(req.Header, h.keys, id, time.Now(), body)
	req.Header.Set("User-Agent", "Tandem-Webhooks/1")
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%w: %s answered %d", ErrRejected, ep.url, resp.StatusCode)
	}
	return nil
}
