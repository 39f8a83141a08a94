import { RetrySchedule, type BackoffOptions } from "./backoff.js"
import { Emitter } from "./emitter.js"

/** One of the people behind a notification. */
export interface NotificationActor {
  id: string
  name?: string
}

/**
 * What a recipient sees: the events of one kind on one document within a
 * window of time, folded together by the server.
 */
export interface Notification {
  id: number
  recipient: string
  /** What happened: "mention", or an application's own kind ("comment.reply"). */
  kind: string
  /** The document it is about, if any (a document id). */
  document?: string
  /** The document's title as the notification shows it. */
  title?: string
  /** The sentence to show, e.g. "Ana and 12 others mentioned you in Roadmap". */
  text: string
  /** The first distinct actors; {@link actorCount} counts them all. */
  actors: NotificationActor[]
  actorCount: number
  /** How many events were folded into this notification. */
  events: number
  /** The latest event's payload, as the application posted it. */
  payload?: unknown
  /** When the first and the latest event happened (Unix ms, server clock). */
  firstAt: number
  lastAt: number
  /** When the notification was stored (Unix ms, server clock). */
  createdAt: number
  read: boolean
}

/** A page of {@link TandemNotifications.list}. */
export interface NotificationPage {
  /** Newest first. */
  notifications: Notification[]
  /** The recipient's unread count. */
  unread: number
  /** What to pass as `before` for the next page; 0 when this is the last one. */
  next: number
}

/** Options of {@link TandemNotifications.list}. */
export interface ListOptions {
  /** Only unread notifications. */
  unread?: boolean
  /** Page size; the server's default is 20 and its maximum 100. */
  limit?: number
  /** Only notifications older than this id: the `next` of the previous page. */
  before?: number
}

/** Where the live channel stands. */
export type NotificationsState = "connecting" | "open" | "closed"

/** Events of {@link TandemNotifications}. */
export type NotificationsEvents = {
  /** A notification this client has not seen yet arrived live. */
  notification: (n: Notification) => void
  /** The unread count changed. */
  unread: (count: number) => void
  /**
   * Notifications were marked read: by this object's {@link TandemNotifications.markRead}
   * (the ids, or "all"), or as the stream reports, in another tab or by this
   * one (undefined: the server does not say which).
   */
  read: (ids: number[] | "all" | undefined) => void
  /** The live channel's state changed. */
  state: (state: NotificationsState) => void
}

/** A server-sent event as an {@link EventSourceLike} delivers it. */
export interface ServerSentEvent {
  data?: unknown
  lastEventId?: string
}

/** The part of the browser's `EventSource` this class uses. */
export interface EventSourceLike {
  /** 0 connecting, 1 open, 2 closed (given up: no more reconnection). */
  readonly readyState: number
  addEventListener(type: string, listener: (ev: ServerSentEvent) => void): void
  close(): void
}
export type EventSourceConstructor = new (url: string) => EventSourceLike

/** The part of a `fetch` response this class uses. */
export interface FetchResponse {
  ok: boolean
  status: number
  json(): Promise<unknown>
  text(): Promise<string>
}
/** The part of `fetch` this class uses. */
export type FetchFunction = (
  url: string,
  init?: { method?: string; headers?: Record<string, string>; body?: string },
) => Promise<FetchResponse>

/** Options of {@link TandemClient.notifications}. */
export interface NotificationsOptions {
  /**
   * Whose notifications: required when the client has no token (the
   * server's open mode). With a token the server takes the user from it
   * and refuses any other user, so leave it out.
   */
  user?: string
  /** Opens the live channel at once. Default true; false for list and markRead only. */
  live?: boolean
  /** An EventSource implementation for environments without a global one. */
  EventSource?: EventSourceConstructor
  /** A fetch implementation; the global one by default. */
  fetch?: FetchFunction
  /** Backoff between attempts when the browser has given up on the stream. */
  backoff?: BackoffOptions
}

/** What a {@link TandemNotifications} needs: the options plus the client's server and token. */
export interface NotificationsConfig extends NotificationsOptions {
  /** The server's WebSocket URL (`wss://host/ws`); the API is at the same host over HTTP(S). */
  url: string
  /** The client's token, or a function returning one, called before every request. */
  token?: string | (() => string | Promise<string>)
}

/** An HTTP request to the notification API that did not succeed. */
export class NotificationsError extends Error {
  /** The HTTP status. */
  readonly status: number
  constructor(status: number, message: string) {
    super(message)
    this.name = "NotificationsError"
    this.status = status
  }
}

/** The server takes at most this many ids per mark-read request. */
const MAX_IDS = 1000
/** Page size and page count when catching up after a fresh stream. */
const CATCH_UP_PAGE = 50
const CATCH_UP_PAGES = 20
/** EventSource.readyState values. */
const CONNECTING = 0
const CLOSED = 2

/**
 * Returns the HTTP origin of the server behind a WebSocket URL:
 * `wss://host/ws` becomes `https://host`, `ws:` becomes `http:`.
 */
export function httpOrigin(wsUrl: string): string {
  const u = new URL(wsUrl)
  const protocol = u.protocol === "wss:" ? "https:" : u.protocol === "ws:" ? "http:" : u.protocol
  return `${protocol}//${u.host}`
}

/**
 * A user's notifications on a Tandem server: pages of them over HTTP, and
 * the new ones and the unread count live over Server-Sent Events.
 *
 * The live channel is an `EventSource` on `/api/notifications/stream`. The
 * browser reconnects it by itself and sends `Last-Event-ID`, and the
 * server replays what was stored meanwhile. Pushes come at least once, so
 * a notification whose id this object has seen (live or in a page from
 * {@link list}) is dropped. When the browser gives up (the server refused,
 * e.g. an expired token), a new stream is opened after a backoff, with a
 * fresh token when the token is a function. A new stream has no
 * `Last-Event-ID` (nor has a stream that never carried a notification), so
 * on every connection the newest page is fetched too and what is newer
 * than the newest id known and unseen is emitted like a live notification.
 *
 * The unread count comes from the server with every push, page and
 * mark-read answer. The stream is ordered and wins: the count of an HTTP
 * answer is taken only if no push arrived while the request was under way.
 */
export class TandemNotifications extends Emitter<NotificationsEvents> {
  /** The HTTP origin of the API, e.g. `https://tandem.example.com`. */
  readonly origin: string
  /** The user given in the options, if any. */
  readonly user: string | undefined
  #token: NotificationsConfig["token"]
  #fetch: FetchFunction
  #ES: EventSourceConstructor | undefined
  #es: EventSourceLike | undefined
  #state: NotificationsState = "closed"
  #unread = 0
  #seen = new Set<number>()
  /** The highest id known; undefined until a page or push or baseline told. */
  #newest: number | undefined
  /** How many unread counts the stream has brought: an HTTP answer that saw this change is older. */
  #pushes = 0
  #live: boolean
  #closed = false
  #suspended = false
  #generation = 0
  #retries: RetrySchedule

  constructor(config: NotificationsConfig) {
    super()
    if (!config.user && config.token === undefined) {
      throw new Error("notifications: a user is required when the client has no token")
    }
    this.origin = httpOrigin(config.url)
    this.user = config.user || undefined
    this.#token = config.token
    this.#retries = new RetrySchedule(config.backoff)
    const f = config.fetch ?? (globalThis as { fetch?: FetchFunction }).fetch
    if (!f) throw new Error("notifications: no fetch implementation: pass options.fetch")
    // The global fetch must be called as a plain function, not as a method of this object.
    this.#fetch = config.fetch ?? ((url, init) => f(url, init))
    this.#live = config.live ?? true
    if (this.#live) {
      this.#ES = config.EventSource ?? (globalThis as { EventSource?: EventSourceConstructor }).EventSource
      if (!this.#ES) throw new Error("notifications: no EventSource implementation: pass options.EventSource, or live: false")
      this.#connect()
    }
  }

  /** The unread count, as the server last told it (0 until it did). */
  get unread(): number {
    return this.#unread
  }

  /** The live channel's state; "closed" when it is not live. */
  get state(): NotificationsState {
    return this.#state
  }

  /**
   * Fetches a page of notifications, newest first. Their ids count as seen:
   * a later push of one of them is dropped.
   */
  async list(opts: ListOptions = {}): Promise<NotificationPage> {
    const params: Record<string, string> = {}
    if (opts.unread) params.unread = "true"
    if (opts.limit !== undefined) params.limit = String(opts.limit)
    if (opts.before) params.before = String(opts.before)
    const pushes = this.#pushes
    const body = (await this.#request("GET", "", params)) as Partial<NotificationPage> | null
    const page: NotificationPage = {
      notifications: Array.isArray(body?.notifications) ? body.notifications.filter(isNotification) : [],
      unread: count(body?.unread) ?? this.#unread,
      next: typeof body?.next === "number" ? body.next : 0,
    }
    for (const n of page.notifications) this.#see(n.id)
    if (pushes === this.#pushes) this.#setUnread(page.unread)
    return page
  }

  /**
   * Marks notifications read, by id or "all" of them, and returns the
   * unread count. Emits `read` with what was given.
   */
  async markRead(ids: number[] | "all"): Promise<number> {
    if (ids !== "all" && ids.length === 0) return this.#unread
    const pushes = this.#pushes
    let unread: number | undefined
    if (ids === "all") {
      unread = count(((await this.#request("POST", "/read", {}, { all: true })) as { unread?: unknown } | null)?.unread)
    } else {
      for (let i = 0; i < ids.length; i += MAX_IDS) {
        const body = { ids: ids.slice(i, i + MAX_IDS) }
        unread = count(((await this.#request("POST", "/read", {}, body)) as { unread?: unknown } | null)?.unread)
      }
    }
    if (unread !== undefined && pushes === this.#pushes) this.#setUnread(unread)
    this.emit("read", ids === "all" ? "all" : [...ids])
    return this.#unread
  }

  /** Stops the live channel for good. Pages can still be fetched. */
  close(): void {
    this.#closed = true
    this.#stop()
  }

  /**
   * Closes the live channel until {@link resume}, e.g. while the page is in
   * the back/forward cache. {@link TandemClient} calls it on `pagehide`.
   */
  suspend(): void {
    if (this.#closed || !this.#live) return
    this.#suspended = true
    this.#stop()
  }

  /** Reopens the live channel after {@link suspend}; missed notifications are fetched. */
  resume(): void {
    if (this.#closed || !this.#live || !this.#suspended) return
    this.#suspended = false
    this.#retries.reset()
    this.#connect()
  }

  /** Stops waiting for the next attempt and reconnects now (e.g. when the browser comes back online). */
  retryNow(): void {
    if (this.#closed || this.#suspended || !this.#live || this.#es || this.#state !== "closed") return
    this.#retries.cancel()
    this.#connect()
  }

  #stop(): void {
    this.#generation++
    this.#retries.cancel()
    this.#es?.close()
    this.#es = undefined
    this.#setState("closed")
  }

  #connect(): void {
    const generation = ++this.#generation
    this.#setState("connecting")
    const t = this.#token
    if (typeof t === "function") {
      // The token may come asynchronously; a close in the meantime wins.
      Promise.resolve()
        .then(t)
        .then(
          tok => generation === this.#generation && this.#open(tok),
          () => generation === this.#generation && this.#retry(),
        )
    } else {
      this.#open(t)
    }
  }

  #open(token: string | undefined): void {
    const es = new this.#ES!(this.#url("/stream", {}, token))
    this.#es = es
    const mine = (f: (data: Record<string, unknown>) => void) => (ev: ServerSentEvent) => {
      if (es !== this.#es) return // events of a stream already closed
      let data: unknown
      try {
        data = JSON.parse(String(ev.data))
      } catch {
        return
      }
      if (data && typeof data === "object") f(data as Record<string, unknown>)
    }
    es.addEventListener("open", () => {
      if (es !== this.#es) return
      this.#retries.reset()
      this.#setState("open")
    })
    es.addEventListener("error", () => es === this.#es && this.#onError(es))
    // The server's first event on every connection, the browser's own
    // reconnections included. Those resume with Last-Event-ID and the
    // server replays what was stored meanwhile, but only once the stream
    // has carried an id; a new stream carries none. So every connection
    // looks for what was missed (what both deliver is dropped by id).
    es.addEventListener(
      "unread",
      mine(d => {
        this.#fromStream(d.unread)
        this.#catchUp(es).catch(() => {}) // the stream works without it
      }),
    )
    es.addEventListener(
      "notification",
      mine(d => {
        const n = d.notification
        if (!isNotification(n) || this.#seen.has(n.id)) return // pushed before: at least once
        this.#see(n.id)
        this.#pushes++
        const unread = count(d.unread)
        const changed = unread !== undefined && unread !== this.#unread
        if (unread !== undefined) this.#unread = unread
        this.emit("notification", n)
        if (changed) this.emit("unread", this.#unread)
      }),
    )
    es.addEventListener(
      "read",
      mine(d => {
        this.#fromStream(d.unread)
        this.emit("read", undefined)
      }),
    )
  }

  // While the browser reconnects by itself the stream is "connecting"; once
  // it has given up (an HTTP error, a wrong content type), open a new one
  // after a backoff.
  #onError(es: EventSourceLike): void {
    if (es.readyState === CONNECTING) {
      this.#setState("connecting")
      return
    }
    if (es.readyState !== CLOSED) return
    es.close()
    this.#es = undefined
    this.#retry()
  }

  #retry(): void {
    // Scheduled before the state is told: a listener that retries now
    // cancels this attempt rather than opening a second stream.
    const generation = this.#generation
    this.#retries.schedule(() => generation === this.#generation && this.#connect())
    this.#setState("closed")
  }

  // #catchUp runs whenever the stream has (re)connected. Knowing the
  // newest id from before, it emits what is newer and unseen, oldest
  // first; knowing none (the first connection, before any page), it only
  // learns the newest id, so that later connections catch up from there.
  async #catchUp(es: EventSourceLike): Promise<void> {
    const newest = this.#newest
    if (newest === undefined) {
      const body = (await this.#request("GET", "", { limit: "1" })) as Partial<NotificationPage> | null
      const n = Array.isArray(body?.notifications) ? body.notifications.find(isNotification) : undefined
      this.#newest = Math.max(this.#newest ?? 0, n?.id ?? 0)
      return
    }
    const missed: Notification[] = []
    let before = 0
    for (let i = 0; i < CATCH_UP_PAGES; i++) {
      const params: Record<string, string> = { limit: String(CATCH_UP_PAGE) }
      if (before) params.before = String(before)
      const body = (await this.#request("GET", "", params)) as Partial<NotificationPage> | null
      if (es !== this.#es) return
      const page = Array.isArray(body?.notifications) ? body.notifications.filter(isNotification) : []
      missed.push(...page.filter(n => n.id > newest))
      before = typeof body?.next === "number" ? body.next : 0
      if (!before || page.some(n => n.id <= newest)) break
    }
    missed.sort((a, b) => a.id - b.id)
    for (const n of missed) {
      if (this.#seen.has(n.id) || es !== this.#es) continue
      this.#see(n.id)
      this.emit("notification", n)
    }
  }

  #fromStream(value: unknown): void {
    const unread = count(value)
    if (unread === undefined) return
    this.#pushes++
    this.#setUnread(unread)
  }

  #see(id: number): void {
    this.#seen.add(id)
    this.#newest = Math.max(this.#newest ?? 0, id)
  }

  #setUnread(n: number): void {
    if (n === this.#unread) return
    this.#unread = n
    this.emit("unread", n)
  }

  #setState(s: NotificationsState): void {
    if (s === this.#state) return
    this.#state = s
    this.emit("state", s)
  }

  #url(path: string, params: Record<string, string>, token: string | undefined): string {
    const u = new URL(`/api/notifications${path}`, this.origin)
    if (this.user) u.searchParams.set("user", this.user)
    for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v)
    // EventSource cannot set headers, so the token goes in the query everywhere.
    if (token) u.searchParams.set("token", token)
    return u.toString()
  }

  async #request(method: "GET" | "POST", path: string, params: Record<string, string>, body?: unknown): Promise<unknown> {
    const t = this.#token
    const token = typeof t === "function" ? await t() : t
    const init: Parameters<FetchFunction>[1] = { method, headers: { accept: "application/json" } }
    if (body !== undefined) {
      init.headers!["content-type"] = "application/json"
      init.body = JSON.stringify(body)
    }
    const res = await this.#fetch(this.#url(path, params, token), init)
    if (!res.ok) {
      let message = `HTTP ${res.status}`
      try {
        const text = await res.text()
        try {
          const e = JSON.parse(text) as { error?: unknown }
          message = typeof e?.error === "string" ? e.error : text || message
        } catch {
          message = text || message
        }
      } catch {
        // no body
      }
      throw new NotificationsError(res.status, `notifications: ${message}`)
    }
    return res.json()
  }
}

function count(v: unknown): number | undefined {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : undefined
}

function isNotification(v: unknown): v is Notification {
  if (!v || typeof v !== "object") return false
  const n = v as Partial<Notification>
  return typeof n.id === "number" && Number.isInteger(n.id) && n.id > 0 && typeof n.text === "string"
}
