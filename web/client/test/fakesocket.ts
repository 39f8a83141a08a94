// A WebSocket stand-in for the client's unit tests: the test plays the server.
import { cbor } from "@automerge/automerge-repo/slim"
import type { SocketLike } from "../src/socket.js"

// FakeSocket records what the adapter sends and lets the test play the server.
export class FakeSocket implements SocketLike {
  static all: FakeSocket[] = []
  binaryType = ""
  readyState = 0
  onopen: ((ev: unknown) => void) | null = null
  onclose: ((ev: unknown) => void) | null = null
  onerror: ((ev: unknown) => void) | null = null
  onmessage: ((ev: { data: unknown }) => void) | null = null
  sent: Record<string, unknown>[] = []
  closed = false
  constructor(readonly url: string) {
    FakeSocket.all.push(this)
  }
  send(data: ArrayBufferLike | ArrayBufferView) {
    this.sent.push(cbor.decode(data as Uint8Array))
  }
  close() {
    this.closed = true
  }
  // server side
  open() {
    this.readyState = 1
    this.onopen?.({})
  }
  deliver(m: Record<string, unknown>) {
    const b = cbor.encode(m)
    this.onmessage?.({ data: b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) })
  }
  serverClose(code = 1006, reason = "") {
    this.readyState = 3
    this.onclose?.({ code, reason })
  }
  ackAll() {
    for (const b of this.beats()) this.deliver({ type: "tandem-heartbeat-ack", seq: b.seq })
  }
  beats() {
    return this.sent.filter(m => m.type === "tandem-heartbeat")
  }
}

// handshake opens s and answers the client's join as a server would.
export function handshake(s: FakeSocket) {
  s.open()
  s.deliver({ type: "peer", senderId: "server", targetId: "me", peerMetadata: {}, selectedProtocolVersion: "1" })
}
