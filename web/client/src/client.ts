import { Repo, isValidAutomergeUrl } from "@automerge/automerge-repo"
import type { AutomergeUrl, DocHandle, PeerId } from "@automerge/automerge-repo"
import { ActivityMonitor } from "./activity.js"
import { TandemNotifications, type NotificationsOptions } from "./notifications.js"
import { TandemPresence, type PresenceOptions } from "./presence.js"
import { TandemSocket, type SocketOptions, type StateChange, type ConnectionState } from "./socket.js"

/** Options of {@link connect}. */
export interface ConnectOptions extends SocketOptions {
  /** This client's peer id; a random one by default. */
  peerId?: string
  /**
   * Idle time in ms after which presences turn "away" (also at once when
   * the page is hidden). Default 60 000; 0 turns tracking off.
   */
  idleMs?: number
}

/**
 * A connection to a Tandem server: an automerge-repo `Repo` whose network
 * is a {@link TandemSocket}, plus presence per document. In a browser it
 * says goodbye on `pagehide` and comes back on `pageshow`.
 */
export class TandemClient {
  readonly repo: Repo
  readonly socket: TandemSocket
  #presences = new Set<TandemPresence>()
  #notifications = new Set<TandemNotifications>()
  #token: ConnectOptions["token"]
  #activity: ActivityMonitor | undefined
  // Presences whose latest snapshot may have gone out before the repo
  // made the server a peer of their document, so that the server never
  // heard it: each announces again once the repo syncs its document with
  // the server, or after REANNOUNCE_MS at the latest.
  #unheard = new Map<TandemPresence, ReturnType<typeof setTimeout>>()
  #suspended: TandemPresence[] = []
  #unlisten: (() => void)[] = []

  constructor(options: ConnectOptions) {
    this.socket = new TandemSocket(options)
    this.#token = options.token
    const peerId = (options.peerId ?? `tandem-${randomId()}`) as PeerId
    this.repo = new Repo({ network: [this.socket], peerId })
    // After a reconnection the server has said goodbye for this peer: send
    // each presence's whole state again once the repo has re-added the
    // server to its document (it does so asynchronously).
    let wasOpen = false
    this.socket.onState(({ state }) => {
      if (state === "open" && wasOpen) this.#presences.forEach(p => p.running && this.#unheardBy(p))
      if (state === "open") wasOpen = true
    })
    this.socket.onDocumentSync(id => {
      for (const p of this.#unheard.keys()) if (p.handle.documentId === id) this.#announce(p)
    })
    const g = globalThis as unknown as { window?: Window; document?: Document }
    if (g.window && g.document) {
      const w = g.window
      const idleMs = options.idleMs ?? 60_000
      if (idleMs > 0) {
        this.#activity = new ActivityMonitor({
          idleMs,
          target: w,
          visibility: g.document,
          onChange: s => this.#presences.forEach(p => p.setStatus(s)),
        })
      }
      const hide = () => this.#suspend()
      const show = (e: PageTransitionEvent) => e.persisted && this.#resume()
      const online = () => {
        this.socket.retryNow()
        this.#notifications.forEach(n => n.retryNow())
      }
      w.addEventListener("pagehide", hide)
      w.addEventListener("pageshow", show)
      w.addEventListener("online", online)
      this.#unlisten.push(
        () => w.removeEventListener("pagehide", hide),
        () => w.removeEventListener("pageshow", show),
        () => w.removeEventListener("online", online),
      )
    }
  }

  /** The connection state. */
  get state(): ConnectionState {
    return this.socket.state
  }

  /** Subscribes to connection state changes; returns the unsubscribe function. */
  onState(listener: (c: StateChange) => void): () => void {
    return this.socket.onState(listener)
  }

  /** Creates a document with the given initial value. */
  create<T>(initial: T): DocHandle<T> {
    return this.repo.create<T>(initial)
  }

  /**
   * Opens a document by URL (`automerge:…`) or bare id and waits until it is
   * ready. Rejects if no peer has it.
   */
  async open<T>(urlOrId: string): Promise<DocHandle<T>> {
    const url = (urlOrId.startsWith("automerge:") ? urlOrId : `automerge:${urlOrId}`) as AutomergeUrl
    if (!isValidAutomergeUrl(url)) throw new Error(`not a document id: ${urlOrId}`)
    return this.repo.find<T>(url)
  }

  /** Starts presence on a document. */
  presence(handle: DocHandle<unknown>, options: PresenceOptions): TandemPresence {
    const p = new TandemPresence(handle, options)
    if (this.#activity?.status === "away") p.setStatus("away")
    p.start()
    // The first snapshot can go out before the repo has made the server a
    // peer of the document (always so for a document just created), and
    // then the server never learns who this peer is: a mention it types
    // would name its peer id.
    this.#unheardBy(p)
    for (const q of this.#presences) if (!q.running) this.#presences.delete(q) // stopped by the app
    this.#presences.add(p)
    return p
  }

  /**
   * Starts a user's notifications: pages over HTTP and a live channel over
   * Server-Sent Events, at the same host as the WebSocket URL and with the
   * same token. Without a token (the server's open mode) `user` is required.
   */
  notifications(options: NotificationsOptions = {}): TandemNotifications {
    const n = new TandemNotifications({ ...options, url: this.socket.url, token: this.#token })
    this.#notifications.add(n)
    return n
  }

  /** Records user activity seen by other means (e.g. typing in an editor). */
  active(): void {
    this.#activity?.poke()
  }

  /** Says goodbye on every document and closes the connection for good. */
  close(): void {
    this.#presences.forEach(p => p.stop())
    this.#presences.clear()
    this.#notifications.forEach(n => n.close())
    this.#notifications.clear()
    this.#unheard.forEach(t => clearTimeout(t))
    this.#unheard.clear()
    this.#activity?.stop()
    this.#unlisten.forEach(f => f())
    this.repo.shutdown()
  }

  #unheardBy(p: TandemPresence): void {
    clearTimeout(this.#unheard.get(p))
    this.#unheard.set(p, setTimeout(() => this.#announce(p), REANNOUNCE_MS))
  }

  // #announce sends p's state once the repo is done with the message in
  // hand (the sync message that made the server a peer goes first).
  #announce(p: TandemPresence): void {
    clearTimeout(this.#unheard.get(p))
    this.#unheard.delete(p)
    queueMicrotask(() => p.announce())
  }

  #suspend(): void {
    this.#suspended = [...this.#presences].filter(p => p.running)
    this.#suspended.forEach(p => p.stop())
    this.#notifications.forEach(n => n.suspend())
    this.socket.suspend()
  }

  // Presences restart while the socket is still connecting; the snapshot
  // they would send then is lost, and the re-announce after "open" sends it.
  #resume(): void {
    this.socket.resume()
    this.#notifications.forEach(n => n.resume())
    this.#suspended.forEach(p => p.start())
    this.#suspended = []
  }
}

/** Connects to a Tandem server. */
export function connect(options: ConnectOptions): TandemClient {
  return new TandemClient(options)
}

/**
 * The longest wait after a reconnection (or a presence's start) before its
 * snapshot is sent again, if the repo has not synced the document sooner.
 */
const REANNOUNCE_MS = 500

function randomId(): string {
  const b = new Uint8Array(8)
  globalThis.crypto.getRandomValues(b)
  return Array.from(b, x => x.toString(16).padStart(2, "0")).join("")
}
