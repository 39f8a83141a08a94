package main

import (
	"io"
	"reflect"
	"testing"
	"time"
)

func TestWebhookURLsRepeatOrComeCommaSeparated(t *testing.T) {
	env := map[string]string{"TANDEM_WEBHOOK_SECRET": "whsec_x"}
	c, err := parseConfig([]string{"--webhook-url", "http://a/1,http://b/2", "--webhook-url", "http://c/3"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://a/1", "http://b/2", "http://c/3"}; !reflect.DeepEqual(c.WebhookURLs, want) {
		t.Fatalf("webhook URLs %q, want %q", c.WebhookURLs, want)
	}
	if c.WebhookDebounce != 2*time.Second || c.WebhookMaxWait != 10*time.Second {
		t.Fatalf("debounce %v, maximum wait %v, want 2s and 10s", c.WebhookDebounce, c.WebhookMaxWait)
	}
	for _, args := range [][]string{
		{"--webhook-url", "http://a/"}, // no secret
		{"--webhook-debounce", "5s", "--webhook-max-wait", "1s"},
		{"--webhook-debounce", "1ms"},
	} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
