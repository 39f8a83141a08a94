// The "Today" timeline: who was in the document since local midnight, one
// row per user and a bar per stretch of time online or away, read from the
// server's presence history (GET /api/docs/{id}/presence/history).

/** One interval as the history API answers it; to is null while open. */
export interface HistoryInterval {
  user: string
  name: string
  status: "online" | "away"
  from: string
  to: string | null
}

interface HistoryPage {
  intervals: HistoryInterval[]
  next: string | null
}

/** An answer other than 200 from the history API. */
export class HistoryError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message)
  }
}

export interface TimelineOptions {
  /** The section to draw in (see index.html for what it holds). */
  root: HTMLElement
  /** The document's id, without "automerge:". */
  documentId: string
  token?: string
  /** Intervals asked per page; the server's default when unset. */
  limit?: number
  /** How often to read the history again. Default 30 000 ms. */
  refreshMs?: number
  /** How long after a presence change to read it: the server records within about half a second. Default 1000 ms. */
  settleMs?: number
}

export interface Timeline {
  /** Reads the history again shortly, once the server has recorded what just changed. */
  soon(): void
  /** Reads the history now and redraws. */
  refresh(): Promise<void>
}

const hourMs = 3_600_000

/** The start of today, local time. */
function midnight(now: Date): Date {
  return new Date(now.getFullYear(), now.getMonth(), now.getDate())
}

/** readHistory reads every interval overlapping [from, the server's now), page after page. */
export async function readHistory(documentId: string, from: Date, opts: { token?: string; limit?: number } = {}): Promise<HistoryInterval[]> {
  const all: HistoryInterval[] = []
  let after: string | null = null
  do {
    const u = new URL(`/api/docs/${encodeURIComponent(documentId)}/presence/history`, location.origin)
    u.searchParams.set("from", from.toISOString())
    if (opts.limit) u.searchParams.set("limit", String(opts.limit))
    if (after) u.searchParams.set("after", after)
    if (opts.token) u.searchParams.set("token", opts.token)
    const res = await fetch(u, { headers: { accept: "application/json" } })
    if (!res.ok) {
      let message = `HTTP ${res.status}`
      try {
        const e = (await res.json()) as { error?: unknown }
        if (typeof e?.error === "string") message = e.error
      } catch {
        // no JSON body
      }
      throw new HistoryError(res.status, message)
    }
    const page = (await res.json()) as HistoryPage
    all.push(...page.intervals)
    after = page.next
  } while (after)
  return all
}

/** startTimeline draws the timeline in root and keeps it up to date. */
export function startTimeline(opts: TimelineOptions): Timeline {
  const { root, documentId } = opts
  const rows = root.querySelector<HTMLElement>(".timeline-rows")!
  const scale = root.querySelector<HTMLElement>(".timeline-scale")!
  const lines = root.querySelector<HTMLElement>(".timeline-lines")!
  const status = root.querySelector<HTMLElement>(".timeline-status")!
  let intervals: HistoryInterval[] | undefined
  let running: Promise<void> | undefined
  let again = false
  let timer: ReturnType<typeof setTimeout> | undefined

  async function load() {
    const from = midnight(new Date())
    try {
      intervals = await readHistory(documentId, from, opts)
      draw(from)
    } catch (e) {
      if (e instanceof HistoryError && e.status === 501) {
        // This server keeps no presence history.
        clearInterval(ticker)
        root.hidden = true
        return
      }
      root.hidden = false
      status.textContent = `Could not read today's presence: ${e instanceof Error ? e.message : e}`
    }
  }

  function draw(from: Date) {
    const now = new Date()
    const span = Math.max(now.getTime() - from.getTime(), 1)
    const at = (ms: number) => `${(Math.min(Math.max(ms - from.getTime(), 0), span) / span) * 100}%`
    root.hidden = false
    root.dataset.from = from.toISOString()
    root.dataset.to = now.toISOString()

    // A line every hour, a label every few, as many as the width holds.
    const hours = Math.floor(span / hourMs)
    const perHour = (scale.clientWidth || 500) / (span / hourMs)
    const every = [1, 2, 3, 4, 6, 12].find(n => n * perHour >= 48) ?? 24
    const ticks: HTMLElement[] = []
    const marks: HTMLElement[] = []
    for (let h = 0; h <= hours; h++) {
      const t = new Date(from.getFullYear(), from.getMonth(), from.getDate(), h).getTime()
      if (t - from.getTime() >= span) break
      const line = document.createElement("span")
      line.style.left = at(t)
      marks.push(line)
      // Labels too close to "now" would overlap it.
      if (h % every !== 0 || (t - from.getTime()) / span > 0.93) continue
      const tick = document.createElement("span")
      tick.className = "timeline-tick"
      tick.style.left = at(t)
      tick.textContent = new Date(t).toLocaleTimeString([], { hour: "numeric" })
      ticks.push(tick)
    }
    const end = document.createElement("span")
    end.className = "timeline-tick timeline-now"
    end.textContent = "now"
    scale.replaceChildren(...ticks, end)
    lines.replaceChildren(...marks)

    // One row per user, in the order they first came today.
    const byUser = new Map<string, { name: string; ivs: HistoryInterval[] }>()
    for (const iv of intervals ?? []) {
      let u = byUser.get(iv.user)
      if (!u) byUser.set(iv.user, (u = { name: "", ivs: [] }))
      if (iv.name) u.name = iv.name
      u.ivs.push(iv)
    }
    const items: HTMLLIElement[] = []
    for (const [id, u] of byUser) {
      const label = u.name || id
      const li = document.createElement("li")
      li.className = "timeline-row"
      li.dataset.user = id
      const name = document.createElement("span")
      name.className = "timeline-label"
      name.textContent = label
      name.title = `@${id}`
      const track = document.createElement("div")
      track.className = "timeline-track"
      for (const iv of u.ivs) {
        const start = Date.parse(iv.from)
        const stop = iv.to === null ? now.getTime() : Date.parse(iv.to)
        const bar = document.createElement("span")
        bar.className = "timeline-bar"
        bar.dataset.user = id
        bar.dataset.status = iv.status
        bar.dataset.from = iv.from
        bar.dataset.to = iv.to ?? ""
        // Anchored at its end: a bar too short to see grows back in time, so
        // that open ones always end at now.
        bar.style.right = `calc(100% - ${at(stop)})`
        bar.style.width = `calc(${at(stop)} - ${at(start)})`
        bar.setAttribute("role", "img")
        const said = `${label}, ${iv.status}, ${when(start, from)}–${iv.to === null ? "now" : when(stop, from)}`
        bar.setAttribute("aria-label", said)
        bar.title = said
        track.append(bar)
      }
      li.append(name, track)
      items.push(li)
    }
    rows.replaceChildren(...items)
    status.textContent = items.length === 0 ? "No one has been here today." : ""
  }

  async function refresh() {
    if (running) {
      again = true
      return running
    }
    running = (async () => {
      try {
        do {
          again = false
          await load()
        } while (again)
      } finally {
        running = undefined
      }
    })()
    return running
  }

  const ticker = setInterval(() => void refresh(), opts.refreshMs ?? 30_000)
  void refresh()
  return {
    soon() {
      clearTimeout(timer)
      timer = setTimeout(() => void refresh(), opts.settleMs ?? 1000)
    },
    refresh,
  }
}

/** when gives a time of day, with the date if it is before today. */
function when(ms: number, today: Date): string {
  const t = new Date(ms)
  return ms < today.getTime()
    ? t.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" })
    : t.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
}
