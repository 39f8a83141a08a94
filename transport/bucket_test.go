package transport

import (
	"testing"
	"time"
)

func TestBucketAllowsItsBurstThenItsRate(t *testing.T) {
	var b bucket
	now := time.Unix(1000, 0)
	for i := range 5 {
		if !b.allow(10, 5, now) {
			t.Fatalf("take %d of a full bucket of 5 refused", i+1)
		}
	}
	if b.allow(10, 5, now) {
		t.Fatal("a sixth take at once allowed")
	}
	now = now.Add(250 * time.Millisecond) // 2.5 tokens at 10/s
	allowed := 0
	for b.allow(10, 5, now) {
		allowed++
	}
	if allowed != 2 {
		t.Fatalf("%d takes after 250ms at 10/s, want 2", allowed)
	}
	now = now.Add(time.Hour)
	allowed = 0
	for b.allow(10, 5, now) {
		allowed++
	}
	if allowed != 5 {
		t.Fatalf("%d takes after an hour, want the burst of 5", allowed)
	}
	if b.allow(10, 5, now.Add(-time.Second)) {
		t.Fatal("a clock going back gave a token")
	}
}
