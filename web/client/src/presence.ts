import { Presence } from "@automerge/automerge-repo/slim"
import type { DocHandle, PeerId } from "@automerge/automerge-repo/slim"
import { getCursor, getCursorPosition, type Prop } from "@automerge/automerge/slim"
import { jittered } from "./backoff.js"
import { Emitter } from "./emitter.js"
import { Throttle } from "./throttle.js"

/** Who a peer is. With server authentication, the server fills it from the token. */
export interface User {
  id: string
  name: string
  color: string
}

/** A peer's status. "offline" is only ever seen on users, never on live peers. */
export type Status = "online" | "away" | "offline"

/** A selection as Automerge cursors: they keep pointing at the same characters under concurrent edits. */
export interface CursorSelection {
  anchor: string
  head: string
}

/** What this client broadcasts on its presence channels. */
export interface TandemPresenceState {
  user: User
  status: "online" | "away"
  /** The caret (the selection's head) as an Automerge cursor. */
  cursor: string | null
  /** The selection, or null when it is empty. */
  selection: CursorSelection | null
  typing: boolean
  [channel: string]: unknown
}

/** A remote peer (one tab or device). */
export interface PeerView {
  peerId: PeerId
  user: User
  status: "online" | "away"
  cursor: string | null
  selection: CursorSelection | null
  typing: boolean
  /** When anything was last heard from the peer (local clock, ms). */
  lastSeenAt: number
}

/** A user, over all of their peers: the best status, typing if any peer types. */
export interface UserView {
  user: User
  status: Status
  typing: boolean
  /** When the user was last heard from (local clock, ms). */
  lastSeenAt: number
  peers: PeerView[]
}

/** Events of {@link TandemPresence}. */
export type PresenceEvents = {
  /** A peer appeared in the document. */
  join: (peer: PeerView) => void
  /** A peer left (goodbye, closed, or gone silent). */
  leave: (peer: PeerView) => void
  /** A peer's channel changed. */
  change: (peer: PeerView, channel: string) => void
}

/** Options of {@link TandemPresence}. */
export interface PresenceOptions {
  user: User
  /** Path of the text in the document that cursors point into. Default ["text"]. */
  path?: Prop[]
  /** Cursor sends per second, at most; newer values replace older ones. Default 20. */
  cursorsPerSecond?: number
  /** Mean presence heartbeat period in ms, jittered ±20 % per client. Default 15 000. */
  heartbeatMs?: number
  /** How long a typing burst lasts after the last keystroke before a new one starts. Default 2000. */
  typingRefreshMs?: number
}

/**
 * Presence for one document, built on automerge-repo's `Presence`: it
 * speaks the same `__presence` messages, so stock clients see Tandem
 * clients and the other way round. It adds Automerge cursors for the
 * caret and selection, a newest-wins throttle on cursor sends, status,
 * typing bursts, and join/leave/change events per peer.
 */
export class TandemPresence extends Emitter<PresenceEvents> {
  readonly handle: DocHandle<unknown>
  readonly path: Prop[]
  #presence: Presence<TandemPresenceState>
  #opts: Required<PresenceOptions>
  #peers = new Map<PeerId, PeerView>()
  #departed = new Map<string, UserView>() // userId → user with no peer left
  #throttle: Throttle<{ cursor: string | null; selection: CursorSelection | null }>
  #sentSelection: CursorSelection | null = null
  #pushed: { cursor: string | null; selection: CursorSelection | null } | undefined
  #lastTyping = -Infinity
  #typingTimer: ReturnType<typeof setTimeout> | undefined
  #state: TandemPresenceState

  constructor(handle: DocHandle<unknown>, options: PresenceOptions) {
    super()
    this.handle = handle
    this.#opts = { path: ["text"], cursorsPerSecond: 20, heartbeatMs: 15_000, typingRefreshMs: 2000, ...options }
    this.path = this.#opts.path
    this.#presence = new Presence<TandemPresenceState>({ handle })
    this.#throttle = new Throttle(v => this.#sendSelection(v), this.#opts.cursorsPerSecond)
    this.#state = { user: options.user, status: "online", cursor: null, selection: null, typing: false }
    this.#presence.on("snapshot", e => this.#merge(e.peerId, e.state as Partial<TandemPresenceState>, "snapshot"))
    this.#presence.on("update", e => this.#merge(e.peerId, { [e.channel]: e.value }, e.channel))
    this.#presence.on("heartbeat", e => {
      const p = this.#peers.get(e.peerId)
      if (p) p.lastSeenAt = Date.now()
    })
    this.#presence.on("goodbye", e => this.#remove(e.peerId, true))
    this.#presence.on("pruning", e => e.pruned.forEach(id => this.#remove(id, false)))
  }

  /** Starts broadcasting; other peers see this one join. */
  start(): void {
    if (this.#presence.running) return
    const heartbeatMs = jittered(this.#opts.heartbeatMs)
    this.#presence.start({ initialState: this.#state, heartbeatMs, peerTtlMs: 3 * this.#opts.heartbeatMs })
  }

  /** Says goodbye and stops; {@link start} may be called again later. */
  stop(): void {
    this.#throttle.cancel()
    clearTimeout(this.#typingTimer)
    this.#state = { ...this.#presence.getLocalState() }
    this.#presence.stop()
    for (const id of [...this.#peers.keys()]) this.#remove(id, true)
  }

  /**
   * Sends this client's whole state again, as a snapshot. After a
   * reconnection the server has forgotten this peer (it said goodbye for
   * it); {@link TandemClient} calls this once the connection is back.
   */
  announce(): void {
    if (!this.#presence.running) return
    this.handle.broadcast({ __presence: { type: "snapshot", state: this.#presence.getLocalState() } })
  }

  get running(): boolean {
    return this.#presence.running
  }

  /** This client's state as last set. */
  get local(): TandemPresenceState {
    return this.#presence.running ? this.#presence.getLocalState() : this.#state
  }

  /**
   * Sets the local selection by character index into the text; `head` is
   * the caret. The indices become Automerge cursors now and are sent
   * through the throttle.
   */
  setSelection(anchor: number, head: number): void {
    const doc = this.handle.doc()
    if (doc === undefined) return
    let h: string, a: string
    try {
      h = getCursor(doc, this.path, head)
      a = anchor === head ? h : getCursor(doc, this.path, anchor)
    } catch {
      return // no text at path yet
    }
    const v = { cursor: h, selection: anchor === head ? null : { anchor: a, head: h } }
    // A remote edit moves the editor's selection by index but not the
    // character it is on: nothing to send.
    if (this.#pushed && this.#pushed.cursor === v.cursor && sameSelection(this.#pushed.selection, v.selection)) return
    this.#pushed = v
    this.#throttle.push(v)
  }

  /** Sets the local status; peers see "away" dimmed. */
  setStatus(status: "online" | "away"): void {
    if (this.local.status === status) return
    this.#broadcast("status", status)
  }

  /**
   * Records a keystroke. Sends `typing: true` once per burst (again after
   * `typingRefreshMs` of continued typing); the server clears it a few
   * seconds after the last one, so no "stopped typing" message is needed.
   */
  typing(): void {
    const now = Date.now()
    clearTimeout(this.#typingTimer)
    // When the burst is over, clear our own value too, so that a later
    // snapshot does not announce typing. The server has cleared it for
    // everyone already, so it forwards nothing.
    this.#typingTimer = setTimeout(() => this.#broadcast("typing", false), this.#opts.typingRefreshMs + 1000)
    if (now - this.#lastTyping < this.#opts.typingRefreshMs) return
    this.#lastTyping = now
    this.#broadcast("typing", true)
  }

  /** Sets any other channel. */
  set(channel: string, value: unknown): void {
    this.#broadcast(channel, value)
  }

  /** The live remote peers. */
  peers(): PeerView[] {
    return [...this.#peers.values()]
  }

  /** Users: the live ones and those seen here who have left (status "offline"). */
  users(): UserView[] {
    const byUser = new Map<string, UserView>()
    for (const p of this.#peers.values()) {
      let u = byUser.get(p.user.id)
      if (!u) byUser.set(p.user.id, (u = { user: p.user, status: "away", typing: false, lastSeenAt: 0, peers: [] }))
      u.peers.push(p)
      if (p.status === "online") u.status = "online"
      u.typing ||= p.typing
      u.lastSeenAt = Math.max(u.lastSeenAt, p.lastSeenAt)
    }
    for (const [id, u] of this.#departed) if (!byUser.has(id)) byUser.set(id, u)
    return [...byUser.values()]
  }

  /** Where a peer's caret and selection are now, as indices into the current text. */
  positionOf(peer: PeerView): { anchor: number; head: number } | undefined {
    const doc = this.handle.doc()
    if (doc === undefined || !peer.cursor) return undefined
    try {
      const head = getCursorPosition(doc, this.path, peer.cursor)
      const anchor = peer.selection ? getCursorPosition(doc, this.path, peer.selection.anchor) : head
      return { anchor, head }
    } catch {
      return undefined // a cursor into text this replica has not received yet
    }
  }

  #broadcast(channel: string, value: unknown): void {
    if (this.#presence.running) this.#presence.broadcast(channel, value as never)
    else this.#state = { ...this.#state, [channel]: value }
  }

  #sendSelection(v: { cursor: string | null; selection: CursorSelection | null }): void {
    this.#broadcast("cursor", v.cursor)
    if (!sameSelection(this.#sentSelection, v.selection)) this.#broadcast("selection", v.selection)
    this.#sentSelection = v.selection
  }

  #merge(peerId: PeerId, values: Partial<TandemPresenceState>, channel: string): void {
    let p = this.#peers.get(peerId)
    const isNew = !p
    if (!p) {
      p = {
        peerId,
        user: { id: peerId, name: "anonymous", color: "#888888" },
        status: "online",
        cursor: null,
        selection: null,
        typing: false,
        lastSeenAt: 0,
      }
      this.#peers.set(peerId, p)
    }
    if (values.user && typeof values.user === "object") p.user = normalizeUser(values.user, peerId)
    if ("status" in values) p.status = values.status === "away" ? "away" : "online"
    if ("cursor" in values) p.cursor = typeof values.cursor === "string" ? values.cursor : null
    if ("selection" in values) p.selection = isSelection(values.selection) ? values.selection : null
    if ("typing" in values) p.typing = !!values.typing
    p.lastSeenAt = Date.now()
    if (isNew) {
      this.#departed.delete(p.user.id)
      this.emit("join", p)
    } else {
      this.emit("change", p, channel)
    }
  }

  // #remove forgets a peer. A goodbye means it was there until now; a
  // peer pruned for silence was last seen when it last spoke.
  #remove(peerId: PeerId, goodbye: boolean): void {
    const p = this.#peers.get(peerId)
    if (!p) return
    this.#peers.delete(peerId)
    if (goodbye) p.lastSeenAt = Date.now()
    if (![...this.#peers.values()].some(q => q.user.id === p.user.id)) {
      this.#departed.set(p.user.id, { user: p.user, status: "offline", typing: false, lastSeenAt: p.lastSeenAt, peers: [] })
    }
    this.emit("leave", p)
  }
}

function normalizeUser(u: Partial<User>, peerId: string): User {
  return {
    id: typeof u.id === "string" && u.id ? u.id : peerId,
    name: typeof u.name === "string" && u.name ? u.name : "anonymous",
    color: normalizeColor(u.color),
  }
}

/**
 * Returns a CSS hex color as #rrggbb (alpha dropped, so that callers may
 * append their own), or grey for anything else.
 */
export function normalizeColor(c: unknown): string {
  if (typeof c !== "string" || !/^#([0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8})$/i.test(c)) return "#888888"
  const hex = c.slice(1).toLowerCase()
  if (hex.length <= 4) return "#" + [...hex.slice(0, 3)].map(d => d + d).join("")
  return "#" + hex.slice(0, 6)
}

function sameSelection(a: CursorSelection | null, b: CursorSelection | null): boolean {
  return a === b || (a !== null && b !== null && a.anchor === b.anchor && a.head === b.head)
}

function isSelection(v: unknown): v is CursorSelection {
  return !!v && typeof v === "object" && typeof (v as CursorSelection).anchor === "string" && typeof (v as CursorSelection).head === "string"
}


