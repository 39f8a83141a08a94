package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Centrifugo, beside Tandem in the presence scenario: the same load, each
// document a channel, each peer a client that subscribes to it and
// publishes its cursor moves there, speaking Centrifugo's JSON protocol
// over WebSocket as its JavaScript client does. A publication carries the
// same presence message as Tandem's peers send, and its sender's id, since
// Centrifugo also sends a publication to its publisher, who leaves it out.

var centrifugoBin = flag.String("centrifugo-bin", "", "compare, presence: also run this Centrifugo binary (v6) under the same load; --compare-with says which servers run beside Tandem")

// centrifugoPath is the path of Centrifugo's WebSocket endpoint: a --url
// that ends in it is run with Centrifugo's clients.
const centrifugoPath = "/connection/websocket"

// startCentrifugo starts Centrifugo on a free port, open to anonymous
// clients that may subscribe and publish to any channel, with a config
// file in dir.
func startCentrifugo(bin, dir string) (*server, error) {
	config := map[string]any{
		"client": map[string]any{"insecure": true, "allowed_origins": []string{"*"}},
		"log":    map[string]any{"level": "info"},
	}
	b, _ := json.Marshal(config)
	path := filepath.Join(dir, "centrifugo.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, err
	}
	srv, err := startServer("centrifugo", "serving websocket", centrifugoPath,
		bin, "--config", path, "--http_server.address", "127.0.0.1", "--http_server.port", "{port}")
	if err != nil {
		return nil, err
	}
	// It says it serves just before it listens: wait for the port.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", srv.port))
		if err == nil {
			c.Close()
			return srv, nil
		}
		if time.Now().After(deadline) {
			srv.stop()
			return nil, fmt.Errorf("centrifugo does not listen on %d: %w", srv.port, err)
		}
	}
}

// cfClient is a Centrifugo client in one channel.
type cfClient struct {
	id      string
	channel string
	ws      *websocket.Conn
	wmu     sync.Mutex // one writer at a time on ws
	cmdID   atomic.Uint32

	framesIn, bytesIn atomic.Int64
}

func dialCentrifugo(url, channel string, _ bool) (presenceClient, error) {
	ws, _, err := dialer().Dial(url, nil)
	if err != nil {
		return nil, err
	}
	c := &cfClient{id: newPeerID(), channel: channel, ws: ws}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer ws.SetReadDeadline(time.Time{})
	if err := c.call("connect", map[string]any{"name": "tandem-bench"}); err != nil {
		ws.Close()
		return nil, fmt.Errorf("centrifugo connect: %w", err)
	}
	if err := c.call("subscribe", map[string]any{"channel": channel}); err != nil {
		ws.Close()
		return nil, fmt.Errorf("centrifugo subscribe: %w", err)
	}
	return c, nil
}

// call sends a command and waits for its reply. Only before Read.
func (c *cfClient) call(method string, params any) error {
	id, err := c.command(method, params)
	if err != nil {
		return err
	}
	for {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			return err
		}
		for line := range bytes.SplitSeq(b, []byte("\n")) {
			var r struct {
				ID    uint32 `json:"id"`
				Error *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(line, &r) != nil || r.ID != id {
				continue
			}
			if r.Error != nil {
				return fmt.Errorf("error %d: %s", r.Error.Code, r.Error.Message)
			}
			return nil
		}
	}
}

// command sends a command, and returns its id.
func (c *cfClient) command(method string, params any) (uint32, error) {
	id := c.cmdID.Add(1)
	b, err := json.Marshal(map[string]any{"id": id, method: params})
	if err != nil {
		return 0, err
	}
	return id, c.write(b)
}

func (c *cfClient) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

func (c *cfClient) ID() string { return c.id }

func (c *cfClient) publish(presence map[string]any) error {
	_, err := c.command("publish", map[string]any{"channel": c.channel,
		"data": map[string]any{"from": c.id, "__presence": presence}})
	return err
}

func (c *cfClient) Greet() error {
	return c.publish(map[string]any{"type": "snapshot", "state": map[string]any{"user": map[string]any{"id": c.id, "name": c.id}}})
}

func (c *cfClient) Move(seq uint64, sent int64) error {
	return c.publish(map[string]any{"type": "update", "channel": "cursor", "value": map[string]any{"s": seq, "t": sent}})
}

// Read takes what the client is sent as Centrifugo's JavaScript client
// does: a frame holds replies and pushes, one a line, each parsed whole,
// a publication's data too; a ping (an empty reply) is answered.
func (c *cfClient) Read(r *receiver, delivered *atomic.Int64) {
	for {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		c.framesIn.Add(1)
		c.bytesIn.Add(int64(len(b)))
		for line := range bytes.SplitSeq(b, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var m struct {
				ID   uint32 `json:"id"`
				Push *struct {
					Pub *struct {
						Data json.RawMessage `json:"data"`
					} `json:"pub"`
				} `json:"push"`
			}
			if json.Unmarshal(line, &m) != nil {
				continue
			}
			switch {
			case m.ID == 0 && m.Push == nil:
				c.write([]byte("{}")) // a ping: the pong
			case m.Push != nil && m.Push.Pub != nil:
				var data map[string]any
				if json.Unmarshal(m.Push.Pub.Data, &data) != nil {
					continue
				}
				from, _ := data["from"].(string)
				if from == "" || from == c.id {
					continue
				}
				r.mu.Lock()
				r.take(from, data, delivered)
				r.mu.Unlock()
			}
		}
	}
}

func (c *cfClient) Received() (int64, int64) { return c.framesIn.Load(), c.bytesIn.Load() }

func (c *cfClient) Close() { c.ws.Close() }

// newChannel names a channel for a document's worth of clients.
func newChannel() string { return "doc-" + newPeerID()[len("bench-"):] }

var errNoCentrifugo = errors.New("--compare-with centrifugo needs --centrifugo-bin")
