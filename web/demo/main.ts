// The demo page: a collaborative text editor on a Tandem server, with
// remote cursors, a presence list, typing indicators and connection state.
import { automergeSyncPlugin } from "@automerge/automerge-codemirror"
import type { DocHandle } from "@automerge/automerge-repo"
import { EditorView, basicSetup } from "codemirror"
import { connect, type StateChange, type TandemPresence, type UserView } from "@tandemhq/client"
import { remoteCursors, setRemoteCursors, type RemoteCursor } from "./cursors.js"

type TextDoc = { text: string }

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T
const params = new URLSearchParams(location.search)
const palette = ["#e5484d", "#f76b15", "#d6a000", "#30a46c", "#12a594", "#0090ff", "#3e63dd", "#8e4ec6", "#d6409f"]

function localUser() {
  const store = window.localStorage
  let id = store.getItem("tandem.user.id")
  if (!id) store.setItem("tandem.user.id", (id = `u-${crypto.randomUUID().slice(0, 8)}`))
  const name = params.get("name") ?? store.getItem("tandem.user.name") ?? `Guest ${id.slice(2, 5)}`
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
  const view = new EditorView({
    doc: handle.doc()!.text,
    parent: $("editor"),
    extensions: [
      basicSetup,
      EditorView.lineWrapping,
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
    })
  }
  presence.on("join", refresh)
  presence.on("leave", refresh)
  presence.on("change", refresh)
  handle.on("change", refresh)
  setInterval(() => renderPeople(presence), 1000) // "last seen … ago"

  const nameInput = $<HTMLInputElement>("name")
  const colorInput = $<HTMLInputElement>("color")
  nameInput.value = user.name
  colorInput.value = user.color
  const setUser = () => {
    user.name = nameInput.value.trim() || user.name
    user.color = colorInput.value
    localStorage.setItem("tandem.user.name", user.name)
    localStorage.setItem("tandem.user.color", user.color)
    presence.set("user", { ...user })
    renderPeople(presence)
  }
  nameInput.addEventListener("change", setUser)
  colorInput.addEventListener("change", setUser)
  renderPeople(presence)
  Object.assign(window, { tandemDemo: { client, handle, presence, view } })
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
  const name = document.createElement("span")
  name.className = "name"
  name.textContent = u.user.name + (you ? " (you)" : "")
  const meta = document.createElement("span")
  meta.className = "meta"
  meta.textContent = u.typing ? "typing…" : u.status === "offline" ? `last seen ${ago(u.lastSeenAt)}` : u.status
  li.append(dot, swatch, name, meta)
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

$("new-doc").addEventListener("click", () => {
  location.hash = ""
  location.reload()
})
window.addEventListener("hashchange", () => location.reload())

openDocument().then(start, err => {
  $("doc-info").textContent = `Could not open this document: ${err instanceof Error ? err.message : err}`
})
