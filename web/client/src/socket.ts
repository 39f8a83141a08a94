import { NetworkAdapter, cbor } from "@automerge/automerge-repo/slim"
import type { Message, PeerId, PeerMetadata } from "@automerge/automerge-repo/slim"
import { jittered, RetrySchedule, type BackoffOptions } from "./backoff.js"

/** Where a {@link TandemSocket} stands. */
export type ConnectionState = "connecting" | "open" | "closed"

/** Why a connection ended, as reported to {@link TandemSocket.onState}. */
export type CloseReason =
  | "closed" //      the socket closed (server gone, network error, refused)
  | "dead" //        heartbeats went unacknowledged: the path is dead though TCP may not know
  | "error" //       the server closed it with one of its own codes (4000-4999), see `error`
  | "fatal" //       the server refused in a way retrying cannot fix (unsupported protocol,
  //                 expired static token): no further attempts
  | "stopped" //     disconnect() or suspend() was called

/** Options of {@link TandemSocket}. */
export interface SocketOptions {
  /** The server's WebSocket URL, e.g. `wss://example.com/ws`. */
  url: string
  /**
   * A token for servers run with authentication, sent as `?token=`; or a
   * function returning one, called before every connection attempt (so an
   * expired token can be refreshed).
   */
  token?: string | (() => string | Promise<string>)
  /** Mean period of connection heartbeats, in ms (jittered ±20 %). Default 5000. */
  heartbeatMs?: number
  /** Unacknowledged heartbeats after which the connection is dead. Default 3. */
  missedAcks?: number
  /** Reconnection backoff. */
  backoff?: BackoffOptions
  /** A WebSocket implementation for environments without a global one. */
  WebSocket?: WebSocketConstructor
}

/** The part of the WebSocket API this adapter uses. */
export interface SocketLike {
  binaryType: string
  readyState: number
  onopen: ((ev: unknown) => void) | null
  onclose: ((ev: { code?: number; reason?: string }) => void) | null
  onerror: ((ev: unknown) => void) | null
  onmessage: ((ev: { data: unknown }) => void) | null
  send(data: ArrayBufferLike | ArrayBufferView): void
  close(code?: number, reason?: string): void
}
export type WebSocketConstructor = new (url: string) => SocketLike

/** A state change: the new state and, when it is "closed", why. */
export interface StateChange {
  state: ConnectionState
  reason?: CloseReason
  /** The server's close reason or last error message, when reason is "error" or "fatal". */
  error?: string
  /** The WebSocket close code, when the socket closed. */
  code?: number
  /** Delay before the next attempt, when reconnecting. */
  retryInMs?: number
}

const OPEN = 1

/** Close codes after which retrying with the same settings cannot succeed. */
const CLOSE_UNSUPPORTED = 4002
const CLOSE_TOKEN_EXPIRED = 4004

/** How long a connection must last before the backoff starts again from the base. */
const HEALTHY_MS = 10_000

/** What names an ephemeral message as the repo passes it on. */
type EphemeralKeyed = { senderId?: unknown; sessionId?: unknown; count?: unknown; documentId?: unknown }

function ephemeralKey(m: EphemeralKeyed): string {
  return `${String(m.senderId)}\u0000${String(m.sessionId)}\u0000${String(m.count)}\u0000${String(m.documentId)}`
}

/** The ephemeral messages from the server remembered, so as not to send them back. */
const maxRelayed = 4096

/** Many ephemeral messages of one document in one frame (transport/wire/PROTOCOL.md). */
interface PresenceBatch {
  type: "tandem-presence-batch"
  documentId: string
  sessionId: string
  batch: [senderId: string, count: number, data: Uint8Array][]
}

interface HeartbeatAck {
  type: "tandem-heartbeat-ack"
  seq: number
  serverTime?: number
}

/**
 * An automerge-repo network adapter for Tandem (and any automerge-repo
 * WebSocket server). On top of the stock protocol it detects dead
 * connections the way Discord's gateway does: it sends `tandem-heartbeat`
 * every `heartbeatMs` (jittered), the server acknowledges each at once, and
 * `missedAcks` heartbeats without an acknowledgement mean the connection
 * is dead even if the socket still looks open. Lost connections are
 * retried with exponential backoff and full jitter. Messages sent while
 * disconnected are dropped: on reconnection the repo syncs afresh.
 */
export class TandemSocket extends NetworkAdapter {
  readonly url: string
  #token: SocketOptions["token"]
  #opts: Required<Omit<SocketOptions, "token" | "WebSocket" | "backoff">> & SocketOptions
  #WS: WebSocketConstructor
  #socket: SocketLike | undefined
  #remotePeerId: PeerId | undefined
  #state: ConnectionState = "closed"
  #stopped = false
  /** disconnect() was called: the adapter is done, and a late connect() is ignored. */
  #done = false
  #retries: RetrySchedule
  #beatTimer: ReturnType<typeof setTimeout> | undefined
  #seq = 0
  #unacked = 0
  #sentAt = new Map<number, number>()
  #lastError: string | undefined
  #openedAt = 0
  #listeners = new Set<(c: StateChange) => void>()
  #errorListeners = new Set<(message: string) => void>()
  #syncListeners = new Set<(documentId: string) => void>()
  #syncing = new Set<string>() // documents synced on this connection
  #ready = false
  #readyResolve!: () => void
  #readyPromise = new Promise<void>(r => (this.#readyResolve = r))

  /** Round-trip time of the latest acknowledged heartbeat, in ms. */
  rttMs: number | undefined
  /** Server clock minus local clock, in ms, from the latest acknowledgement. */
  clockOffsetMs: number | undefined

  constructor(options: SocketOptions) {
    super()
    this.#opts = { heartbeatMs: 5000, missedAcks: 3, ...options }
    this.#retries = new RetrySchedule(options.backoff)
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket
    if (!WS) throw new Error("no WebSocket implementation: pass options.WebSocket")
    this.#WS = WS
    this.url = options.url
    this.#token = options.token
  }

  /** The current connection state. */
  get state(): ConnectionState {
    return this.#state
  }

  /** The server's peer id while connected. */
  get remotePeerId(): PeerId | undefined {
    return this.#remotePeerId
  }

  /** Subscribes to state changes; returns the unsubscribe function. */
  onState(listener: (c: StateChange) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  /**
   * Subscribes to the server's `error` messages. Most leave the connection
   * open (a read-only document, a dropped message); fatal ones are followed
   * by a close.
   */
  onServerError(listener: (message: string) => void): () => void {
    this.#errorListeners.add(listener)
    return () => this.#errorListeners.delete(listener)
  }

  /**
   * Subscribes to the documents this connection starts to sync: the
   * listener gets a document's id as the repo sends the server its first
   * sync message for it on this connection. The repo has made the server
   * a peer of the document by then, so what is broadcast on the document
   * from now on reaches the server.
   */
  onDocumentSync(listener: (documentId: string) => void): () => void {
    this.#syncListeners.add(listener)
    return () => this.#syncListeners.delete(listener)
  }

  isReady(): boolean {
    return this.#ready
  }

  whenReady(): Promise<void> {
    return this.#readyPromise
  }

  connect(peerId: PeerId, peerMetadata?: PeerMetadata): void {
    // The repo connects its adapters asynchronously, so a client closed in
    // the tick it was made sees connect() after disconnect(): stay closed.
    if (this.#done) return
    if (this.#socket) this.#detach() // connect() again: start over
    this.#retries.cancel()
    this.peerId = peerId
    this.peerMetadata = peerMetadata ?? this.peerMetadata ?? {}
    this.#stopped = false
    // Like the stock adapter: do not hold up find() for long when the
    // server is unreachable; documents then resolve as unavailable.
    setTimeout(() => this.#markReady(), 1000)
    this.#open()
  }

  /** Gives up waiting and tries to connect now (e.g. when the browser comes back online). */
  retryNow(): void {
    if (this.#stopped || this.#state !== "closed" || this.peerId === undefined) return
    this.#retries.cancel()
    this.#open()
  }

  send(message: Message): void {
    const s = this.#socket
    if (!s || s.readyState !== OPEN || this.#state !== "open") return
    // The repo passes every ephemeral message it receives on to its other
    // peers. The server sent what came from it to everyone already:
    // passing that back would only cost the server a read. What came to
    // the repo another way (another adapter, another tab) goes on.
    if (message.type === "ephemeral" && message.senderId !== this.peerId && this.#relayed.delete(ephemeralKey(message))) return
    s.send(cbor.encode(message))
    const id = message.type === "sync" || message.type === "request" ? message.documentId : undefined
    if (id !== undefined && !this.#syncing.has(id)) {
      this.#syncing.add(id)
      for (const l of this.#syncListeners) l(id)
    }
  }

  /** Closes the connection for good; the repo forgets this adapter. */
  disconnect(): void {
    this.#done = true
    this.#stop()
    this.emit("close")
  }

  /**
   * Closes the connection until {@link resume}, e.g. while the page sits in
   * the back/forward cache. The repo keeps this adapter.
   */
  suspend(): void {
    this.#stop()
  }

  /** Reconnects after {@link suspend}. */
  resume(): void {
    if (!this.#stopped || this.peerId === undefined) return
    this.#stopped = false
    this.#retries.reset()
    this.#open()
  }

  #stop(): void {
    this.#stopped = true
    this.#retries.cancel()
    this.#drop("stopped")
  }

  #open(): void {
    this.#setState({ state: "connecting" })
    const t = this.#token
    if (typeof t === "function") {
      // The token may come asynchronously; a stop in the meantime wins.
      Promise.resolve()
        .then(t)
        .then(
          tok => this.#stopped || this.#openSocket(tok),
          err => this.#stopped || this.#retry("closed", String(err)),
        )
    } else {
      this.#openSocket(t)
    }
  }

  #openSocket(token: string | undefined): void {
    const u = new URL(this.url)
    if (token) u.searchParams.set("token", token)
    const s = new this.#WS(u.toString())
    s.binaryType = "arraybuffer"
    this.#socket = s
    this.#lastError = undefined
    s.onopen = () => {
      s.send(
        cbor.encode({
          type: "join",
          senderId: this.peerId,
          // Presence in batches: what piled up for this connection while
          // the server was writing comes in one frame instead of one per
          // peer's update (unpacked in #receive).
          peerMetadata: { ...this.peerMetadata, tandemPresenceBatch: true },
          supportedProtocolVersions: ["1"],
        }),
      )
    }
    // Handlers of a socket that has since been replaced do nothing: they
    // are detached, but events already queued may still run.
    s.onmessage = ev => s === this.#socket && this.#receive(ev.data)
    s.onclose = ev => s === this.#socket && this.#closed(ev.code, ev.reason)
    s.onerror = () => {} // a close event follows
    // A connection attempt that hangs counts as dead too.
    clearTimeout(this.#beatTimer)
    this.#beatTimer = setTimeout(() => this.#drop("dead"), this.#opts.heartbeatMs * this.#opts.missedAcks)
  }

  #closed(code: number | undefined, reason: string | undefined): void {
    const message = reason || this.#lastError
    const fatal = code === CLOSE_UNSUPPORTED || (code === CLOSE_TOKEN_EXPIRED && typeof this.#token !== "function")
    if (fatal) {
      this.#stopped = true
      this.#drop("fatal", message, code)
    } else if (code !== undefined && code >= 4000 && code <= 4999) {
      this.#drop("error", message, code)
    } else {
      this.#drop("closed", undefined, code)
    }
  }

  #receive(data: unknown): void {
    let m: { type?: string; senderId?: PeerId; peerMetadata?: PeerMetadata; message?: string }
    try {
      m = cbor.decode(new Uint8Array(data as ArrayBuffer))
    } catch {
      return
    }
    switch (m.type) {
      case "peer":
        this.#remotePeerId = m.senderId
        this.#openedAt = Date.now()
        this.#syncing.clear()
        this.#setState({ state: "open" })
        this.#markReady()
        this.emit("peer-candidate", { peerId: m.senderId!, peerMetadata: m.peerMetadata ?? {} })
        this.#scheduleBeat()
        return
      case "tandem-heartbeat-ack":
        this.#ack(m as unknown as HeartbeatAck)
        return
      case "tandem-presence-batch":
        this.#unbatch(m as unknown as PresenceBatch)
        return
      case "error":
        this.#lastError = m.message ?? "error"
        for (const l of this.#errorListeners) l(this.#lastError)
        return
    }
    if (m.type === "ephemeral") this.#noteRelayed(m as unknown as EphemeralKeyed)
    this.emit("message", m as unknown as Message)
  }

  // #relayed holds the keys of the ephemeral messages the server sent,
  // the last maxRelayed of them: the repo passes each on, and send leaves
  // out those it passes back here.
  #relayed = new Set<string>()

  #noteRelayed(m: EphemeralKeyed): void {
    this.#relayed.add(ephemeralKey(m))
    if (this.#relayed.size > maxRelayed) this.#relayed.delete(this.#relayed.values().next().value!)
  }

  // #unbatch hands the repo each message of a presence batch as the
  // ephemeral message a stock server would have sent, in order, leaving
  // out this peer's own.
  #unbatch(b: PresenceBatch): void {
    if (!Array.isArray(b.batch) || typeof b.documentId !== "string" || typeof b.sessionId !== "string") return
    for (const e of b.batch) {
      if (!Array.isArray(e) || e.length !== 3) continue
      const [senderId, count, data] = e
      if (senderId === this.peerId || typeof senderId !== "string" || !(data instanceof Uint8Array)) continue
      this.#noteRelayed({ senderId, sessionId: b.sessionId, count, documentId: b.documentId })
      this.emit("message", {
        type: "ephemeral",
        senderId: senderId as PeerId,
        targetId: this.peerId!,
        documentId: b.documentId,
        sessionId: b.sessionId,
        count,
        data,
      } as unknown as Message)
    }
  }

  #scheduleBeat(): void {
    clearTimeout(this.#beatTimer)
    this.#beatTimer = setTimeout(() => this.#beat(), jittered(this.#opts.heartbeatMs))
  }

  #beat(): void {
    if (this.#unacked >= this.#opts.missedAcks) {
      this.#drop("dead")
      return
    }
    const seq = ++this.#seq
    this.#unacked++
    this.#sentAt.set(seq, Date.now())
    this.#socket?.send(
      cbor.encode({ type: "tandem-heartbeat", senderId: this.peerId, targetId: this.#remotePeerId, seq }),
    )
    this.#scheduleBeat()
  }

  #ack(a: HeartbeatAck): void {
    const sent = this.#sentAt.get(a.seq)
    if (sent === undefined) return // from before a reconnection, or forged
    const now = Date.now()
    for (const s of this.#sentAt.keys()) if (s <= a.seq) this.#sentAt.delete(s)
    this.#unacked = 0
    this.rttMs = now - sent
    if (typeof a.serverTime === "number") this.clockOffsetMs = a.serverTime - (sent + now) / 2
  }

  // #detach forgets the current socket and closes it.
  #detach(): void {
    const s = this.#socket
    if (s) {
      s.onopen = s.onclose = s.onerror = s.onmessage = null
      try {
        s.close(1000)
      } catch {
        // already closed
      }
    }
    this.#socket = undefined
  }

  #drop(reason: CloseReason, error?: string, code?: number): void {
    this.#detach()
    clearTimeout(this.#beatTimer)
    this.#unacked = 0
    this.#sentAt.clear()
    const remote = this.#remotePeerId
    this.#remotePeerId = undefined
    if (remote) this.emit("peer-disconnected", { peerId: remote })
    if (this.#stopped) {
      if (this.#state !== "closed" || reason === "fatal") this.#setState({ state: "closed", reason, error, code })
      return
    }
    // A connection that lasted resets the backoff; one the server accepts
    // and then closes again at once (a rate limit, a replaced peer) does not.
    if (this.#openedAt && Date.now() - this.#openedAt >= HEALTHY_MS) this.#retries.reset()
    this.#openedAt = 0
    this.#retry(reason, error, code)
  }

  #retry(reason: CloseReason, error?: string, code?: number): void {
    // Scheduled before the state is told: a listener that retries now
    // cancels this attempt rather than opening a second connection.
    const retryInMs = this.#retries.schedule(() => this.#open())
    this.#setState({ state: "closed", reason, error, code, retryInMs })
  }

  #markReady(): void {
    if (this.#ready) return
    this.#ready = true
    this.#readyResolve()
  }

  #setState(c: StateChange): void {
    this.#state = c.state
    for (const l of this.#listeners) l(c)
  }
}
