// The demo page: a collaborative text editor on a Tandem server, with
// remote cursors, a presence list, typing indicators, connection state and
// a notification bell (mention someone with @<their id>) and a timeline of
// who was in the document today.
import { automergeSyncPlugin } from "@automerge/automerge-codemirror"
import type { DocHandle } from "@automerge/automerge-repo"
import { EditorView, basicSetup } from "codemirror"
import {
  connect,
  NotificationsError,
  type Notification,
  type StateChange,
  type TandemNotifications,
  type TandemPresence,
  type UserView,
} from "@tandemhq/client"
import { largeEdits } from "./large.js"
import { remoteCursors, setRemoteCursors, type RemoteCursor } from "./cursors.js"
import { startTimeline } from "./timeline.js"

type TextDoc = { text: string }

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T
const params = new URLSearchParams(location.search)
const palette = ["#e5484d", "#f76b15", "#d6a000", "#30a46c", "#12a594", "#0090ff", "#3e63dd", "#8e4ec6", "#d6409f"]

// ?user=<id> picks the user id (e.g. for tests that mention known users);
// otherwise it is a random one kept in this browser. A chosen user's name
// defaults to the id and is not stored, so it does not replace the stored
// user's.
const chosenUser = params.get("user")?.trim() || undefined

function localUser() {
  const store = window.localStorage
  let id = chosenUser ?? store.getItem("tandem.user.id")
  if (!id) store.setItem("tandem.user.id", (id = `u-${crypto.randomUUID().slice(0, 8)}`))
  const name = params.get("name") ?? chosenUser ?? store.getItem("tandem.user.name") ?? `Guest ${id.slice(2, 5)}`
  const color = params.get("color") ?? store.getItem("tandem.user.color") ?? palette[Math.floor(Math.random() * palette.length)]
  return { id, name, color }
}

const user = localUser()
const wsURL = `${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}/ws`
$("ws-url").textContent = wsURL
const client = connect({
  url: wsURL,
  token: params.get("token") ?? undefined,
  // ?idle=ms and ?heartbeat=ms tune the away delay and the dead-connection
  // check (about three heartbeats), e.g. for tests.
  idleMs: Number(params.get("idle") ?? 60_000),
  heartbeatMs: Number(params.get("heartbeat") ?? 5000),
})
client.onState(showConnection)
// With a token the server takes the user from it (and refuses any other).
const notes = client.notifications({ user: params.has("token") ? undefined : user.id })
setupBell(notes)

function showConnection(c: StateChange) {
  const el = $("connection")
  el.dataset.state = c.state
  el.textContent =
    c.state === "open"
      ? "connected"
      : c.state === "connecting"
        ? "connecting…"
        : `offline${c.error ? ` (${c.error})` : ""}${c.retryInMs !== undefined ? `, retrying in ${Math.ceil(c.retryInMs / 1000)} s` : ""}`
}

async function openDocument(): Promise<DocHandle<TextDoc>> {
  const id = decodeURIComponent(location.hash.slice(1))
  if (!id) {
    const handle = client.create<TextDoc>({ text: "Welcome to Tandem. Share this page's address and type together.\n" })
    history.replaceState(null, "", `${location.pathname}${location.search}#${handle.documentId}`)
    return handle
  }
  return client.open<TextDoc>(id)
}

function start(handle: DocHandle<TextDoc>) {
  $("doc-info").textContent = `Document ${handle.documentId}`
  const presence = client.presence(handle as DocHandle<unknown>, { user })
  // The server names a document it refuses in its error: a large edit
  // still waiting for it to take a part stops there.
  const refused = new AbortController()
  client.socket.onServerError(message => {
    if (message.includes(handle.documentId)) refused.abort(new Error(message))
  })
  const view = new EditorView({
    doc: handle.doc()!.text,
    parent: $("editor"),
    extensions: [
      basicSetup,
      EditorView.lineWrapping,
      largeEdits(handle, ["text"], { signal: refused.signal }),
      automergeSyncPlugin({ handle, path: ["text"] }),
      remoteCursors(),
      EditorView.updateListener.of(u => {
        if (u.transactions.some(tr => tr.isUserEvent("input") || tr.isUserEvent("delete"))) {
          presence.typing()
          client.active()
        }
        if (u.selectionSet || u.docChanged) {
          const sel = u.state.selection.main
          // After the sync plugin has written this transaction to the document.
          queueMicrotask(() => presence.setSelection(sel.anchor, sel.head))
        }
      }),
    ],
  })
  view.focus()

  let scheduled = false
  const refresh = () => {
    if (scheduled) return
    scheduled = true
    queueMicrotask(() => {
      scheduled = false
      drawCursors(view, presence)
      renderPeople(presence)
      watchPeople()
    })
  }
  presence.on("join", refresh)
  presence.on("leave", refresh)
  presence.on("change", refresh)
  handle.on("change", refresh)
  setInterval(() => {
    renderPeople(presence) // "last seen … ago"
    watchPeople() // this page's own status
  }, 1000)

  // ?historyLimit=n reads the timeline's history n intervals a page (e.g.
  // for tests). Who is here, and how, changing redraws it soon.
  const timeline = startTimeline({
    root: $("timeline"),
    documentId: handle.documentId,
    token: params.get("token") ?? undefined,
    limit: Number(params.get("historyLimit")) || undefined,
  })
  let here = ""
  function watchPeople() {
    const now = [`${user.id}:${presence.local.status}`, ...presence.users().map(u => `${u.user.id}:${u.status}`)].sort().join(" ")
    if (now !== here) {
      here = now
      timeline.soon()
    }
  }

  const nameInput = $<HTMLInputElement>("name")
  const colorInput = $<HTMLInputElement>("color")
  nameInput.value = user.name
  colorInput.value = user.color
  const setUser = () => {
    user.name = nameInput.value.trim() || user.name
    user.color = colorInput.value
    if (!chosenUser) localStorage.setItem("tandem.user.name", user.name)
    localStorage.setItem("tandem.user.color", user.color)
    presence.set("user", { ...user })
    renderPeople(presence)
  }
  nameInput.addEventListener("change", setUser)
  colorInput.addEventListener("change", setUser)
  renderPeople(presence)
  watchPeople()
  Object.assign(window, { tandemDemo: { client, handle, presence, view, notes, timeline } })
}

function drawCursors(view: EditorView, presence: TandemPresence) {
  const cursors: RemoteCursor[] = []
  for (const p of presence.peers()) {
    const pos = presence.positionOf(p)
    if (!pos) continue
    cursors.push({ peerId: p.peerId, name: p.user.name, color: p.user.color, away: p.status === "away", ...pos })
  }
  view.dispatch({ effects: setRemoteCursors.of(cursors) })
}

function ago(ms: number): string {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000))
  if (s < 60) return `${s} s ago`
  if (s < 3600) return `${Math.round(s / 60)} min ago`
  return new Date(ms).toLocaleString()
}

function personItem(u: UserView, you: boolean): HTMLLIElement {
  const li = document.createElement("li")
  li.dataset.status = u.status
  li.dataset.user = u.user.id
  const dot = document.createElement("span")
  dot.className = "dot"
  dot.title = u.status
  const swatch = document.createElement("span")
  swatch.className = "swatch"
  swatch.style.background = u.user.color
  const who = document.createElement("span")
  who.className = "who"
  const name = document.createElement("span")
  name.className = "name"
  name.textContent = u.user.name + (you ? " (you)" : "")
  // How to mention them: @<id> in the text.
  const handle = document.createElement("span")
  handle.className = "handle"
  handle.textContent = `@${u.user.id}`
  handle.title = you ? "Others mention you with this" : `Type @${u.user.id} to mention ${u.user.name}`
  who.append(name, handle)
  const meta = document.createElement("span")
  meta.className = "meta"
  meta.textContent = u.typing ? "typing…" : u.status === "offline" ? `last seen ${ago(u.lastSeenAt)}` : u.status
  li.append(dot, swatch, who, meta)
  return li
}

function renderPeople(presence: TandemPresence) {
  const me: UserView = { user, status: presence.local.status, typing: false, lastSeenAt: Date.now(), peers: [] }
  const others = presence.users().filter(u => u.user.id !== user.id)
  const order = { online: 0, away: 1, offline: 2 }
  others.sort((a, b) => order[a.status] - order[b.status] || a.user.name.localeCompare(b.user.name))
  $("people").replaceChildren(personItem(me, true), ...others.map(u => personItem(u, false)))
  const typists = others.filter(u => u.typing).map(u => u.user.name)
  $("typing").textContent =
    typists.length === 0
      ? ""
      : typists.length === 1
        ? `${typists[0]} is typing…`
        : `${typists.slice(0, -1).join(", ")} and ${typists.at(-1)} are typing…`
}

// since says how long ago a notification's latest event was.
function since(ms: number): string {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000))
  if (s < 10) return "just now"
  if (s < 60) return `${s} s ago`
  if (s < 3600) return `${Math.floor(s / 60)} min ago`
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`
  if (s < 7 * 86_400) return `${Math.floor(s / 86_400)} d ago`
  return new Date(ms).toLocaleDateString()
}

// A document id as the page's address shows it (without "automerge:").
function bareId(id: string): string {
  return id.startsWith("automerge:") ? id.slice("automerge:".length) : id
}

// setupBell binds the bell, its unread badge and its dropdown to the
// user's notifications. The list is fetched each time it opens; while it
// is open, new notifications are added at the top as they arrive.
function setupBell(notes: TandemNotifications) {
  const wrap = $("bell-wrap")
  const bell = $<HTMLButtonElement>("bell")
  const badge = $("bell-count")
  const panel = $("notifications")
  const list = $("notification-list")
  const more = $<HTMLButtonElement>("notifications-more")
  const markAll = $<HTMLButtonElement>("mark-all-read")
  const items = new Map<number, Notification>()
  let next = 0
  let status = "" // shown instead of an empty list: loading, an error

  const showCount = (n: number) => {
    badge.textContent = String(n)
    badge.hidden = n === 0
    bell.setAttribute("aria-label", n === 0 ? "Notifications" : `Notifications, ${n} unread`)
    markAll.disabled = n === 0
  }
  showCount(notes.unread)
  bell.dataset.state = notes.state
  notes.on("unread", showCount)
  notes.on("state", s => {
    bell.dataset.state = s
    // The stream was refused (not a pagehide): a server without
    // notifications says 404, and then the bell goes away.
    if (s === "closed" && document.visibilityState === "visible") {
      notes.list({ limit: 1 }).catch(e => {
        if (e instanceof NotificationsError && e.status === 404) {
          notes.close()
          wrap.hidden = true
        }
      })
    }
  })
  notes.on("notification", n => {
    if (panel.hidden) return
    items.set(n.id, n)
    render()
  })
  notes.on("read", ids => {
    if (panel.hidden) return
    // From the stream (another tab, or this one's echo): which ones is not said.
    if (ids === undefined) return void load()
    for (const n of items.values()) if (ids === "all" || ids.includes(n.id)) n.read = true
    render()
  })

  function item(n: Notification): HTMLLIElement {
    const li = document.createElement("li")
    li.className = "notification"
    li.dataset.id = String(n.id)
    li.dataset.read = String(n.read)
    if (n.document) li.dataset.document = bareId(n.document)
    li.tabIndex = 0
    li.setAttribute("role", "button")
    const text = document.createElement("span")
    text.className = "notification-text"
    text.textContent = n.text
    const time = document.createElement("time")
    time.className = "notification-time"
    time.dateTime = new Date(n.lastAt).toISOString()
    time.title = new Date(n.lastAt).toLocaleString()
    time.textContent = since(n.lastAt)
    li.append(text, time)
    li.addEventListener("click", () => void open(n))
    li.addEventListener("keydown", e => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault()
        void open(n)
      }
    })
    return li
  }

  function render() {
    const sorted = [...items.values()].sort((a, b) => b.id - a.id)
    if (sorted.length === 0) {
      const li = document.createElement("li")
      li.className = "notifications-empty"
      li.textContent = status || "No notifications yet. Others notify you by typing your @id."
      list.replaceChildren(li)
    } else {
      list.replaceChildren(...sorted.map(item))
    }
    more.hidden = next === 0
  }

  // load fetches the newest page. What arrived live meanwhile stays.
  async function load() {
    status = "Loading…"
    try {
      const page = await notes.list({ limit: 20 })
      for (const n of page.notifications) items.set(n.id, n)
      next = page.next
      status = ""
    } catch (e) {
      status = `Could not load notifications: ${e instanceof Error ? e.message : e}`
    }
    render()
  }

  async function open(n: Notification) {
    if (!n.read) {
      n.read = true
      render()
      try {
        await notes.markRead([n.id])
      } catch {
        n.read = false
        render()
      }
    }
    const target = n.document ? bareId(n.document) : ""
    if (target && target !== bareId(decodeURIComponent(location.hash.slice(1)))) {
      show(false)
      location.hash = target // the page reloads on hash changes
    }
  }

  function show(open: boolean) {
    panel.hidden = !open
    bell.setAttribute("aria-expanded", String(open))
    if (open) {
      items.clear()
      next = 0
      render()
      void load()
    }
  }

  bell.addEventListener("click", () => show(!!panel.hidden))
  more.addEventListener("click", async () => {
    if (!next) return
    more.disabled = true
    try {
      const page = await notes.list({ limit: 20, before: next })
      for (const n of page.notifications) items.set(n.id, n)
      next = page.next
      render()
    } catch {
      // the button stays for another try
    } finally {
      more.disabled = false
    }
  })
  markAll.addEventListener("click", async () => {
    for (const n of items.values()) n.read = true
    render()
    try {
      await notes.markRead("all")
    } catch {
      void load()
    }
  })
  // Clicks outside and Escape close the dropdown.
  // (The path as dispatched: a click on an item re-renders the list and
  // detaches the element clicked.)
  document.addEventListener("click", e => {
    if (!panel.hidden && !e.composedPath().includes(wrap)) show(false)
  })
  document.addEventListener("keydown", e => {
    if (e.key === "Escape" && !panel.hidden) {
      show(false)
      bell.focus()
    }
  })
  setInterval(() => {
    if (panel.hidden) return
    for (const li of list.querySelectorAll<HTMLLIElement>(".notification")) {
      const n = items.get(Number(li.dataset.id))
      const time = li.querySelector("time")
      if (n && time) time.textContent = since(n.lastAt)
    }
  }, 10_000)
}

$("new-doc").addEventListener("click", () => {
  location.hash = ""
  location.reload()
})
window.addEventListener("hashchange", () => location.reload())

openDocument().then(start, err => {
  $("doc-info").textContent = `Could not open this document: ${err instanceof Error ? err.message : err}`
})
