// The client as its users get it: `npm pack`, then an install into a
// fresh plain JavaScript project that has nothing else of this repository
// but the two peer dependencies. There its compiled JavaScript must run
// under Node and its type declarations must type-check a TypeScript file.
import assert from "node:assert/strict"
import { execFile } from "node:child_process"
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { test } from "node:test"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

const exec = promisify(execFile)
const clientDir = fileURLToPath(new URL("..", import.meta.url))
const rootModules = join(clientDir, "..", "..", "node_modules")
const tsc = join(rootModules, "typescript", "bin", "tsc")
const limits = { timeout: 60_000, maxBuffer: 16 << 20 }

test("the packed client installs into a plain JavaScript project", { timeout: 120_000 }, async t => {
  const tmp = await mkdtemp(join(tmpdir(), "tandem-client-package-"))
  t.after(() => rm(tmp, { recursive: true, force: true }))
  const packDir = join(tmp, "pack")
  const app = join(tmp, "app")
  await mkdir(packDir)
  await mkdir(app)

  // prepack builds dist/; the scripts' output goes to stderr, the JSON to stdout.
  const packed = await exec("npm", ["pack", "--json", "--pack-destination", packDir], { cwd: clientDir, ...limits })
  const [info] = JSON.parse(packed.stdout) as { filename: string; files: { path: string }[] }[]
  const files = info.files.map(f => f.path).sort()

  await t.test("the tarball holds the compiled client and its README only", () => {
    const extra = files.filter(f => f !== "package.json" && f !== "README.md" && !f.startsWith("dist/"))
    assert.deepEqual(extra, [])
    for (const f of ["dist/index.js", "dist/index.d.ts", "dist/client.js", "dist/client.d.ts", "README.md"]) {
      assert.ok(files.includes(f), `${f} is packed (packed: ${files.join(", ")})`)
    }
    const sources = files.filter(f => f.endsWith(".ts") && !f.endsWith(".d.ts"))
    assert.deepEqual(sources, [])
  })

  // The peer dependencies come from this repository's node_modules as
  // file: links, and --offline makes any attempt to fetch fail instead,
  // so the install needs no network.
  await writeFile(join(app, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }))
  await exec(
    "npm",
    [
      "install",
      "--offline",
      "--ignore-scripts",
      "--no-audit",
      "--no-fund",
      join(packDir, info.filename),
      `file:${join(rootModules, "@automerge", "automerge")}`,
      `file:${join(rootModules, "@automerge", "automerge-repo")}`,
    ],
    { cwd: app, ...limits },
  )

  await t.test("its JavaScript runs: a client joins a scripted server and syncs a document", async () => {
    await writeFile(join(app, "use.mjs"), useProgram)
    const { stdout } = await exec(process.execPath, ["use.mjs"], { cwd: app, ...limits })
    assert.equal(stdout.trim(), "ok")
  })

  await t.test("its declarations type-check a TypeScript user", async () => {
    await writeFile(join(app, "use.ts"), useTypes)
    await writeFile(join(app, "tsconfig.json"), JSON.stringify(consumerTsconfig))
    const r = await exec(process.execPath, [tsc, "-p", app], { cwd: app, ...limits }).catch(e => e)
    assert.equal(r.code ?? 0, 0, `tsc failed:\n${r.stdout}${r.stderr}`)
  })
})

// useProgram is the plain JavaScript user. Its WebSocket plays a server:
// it answers the join, and the repo then syncs the new document to it.
const useProgram = `
import assert from "node:assert/strict"
import { cbor } from "@automerge/automerge-repo/slim"
import * as tandem from "@tandemhq/client"

for (const name of ["connect", "TandemClient", "TandemSocket", "TandemPresence", "TandemNotifications",
  "NotificationsError", "httpOrigin", "spliceText", "ActivityMonitor", "Throttle", "backoffDelay", "jittered"]) {
  assert.equal(typeof tandem[name], "function", name)
}
assert.equal(tandem.MAX_CHANGE_CHARS, 1000000)
assert.equal(tandem.httpOrigin("wss://tandem.example/ws"), "https://tandem.example")
assert.equal(tandem.backoffDelay(2, { baseMs: 100 }, () => 0.5), 200)

let server
const gotSync = new Promise(resolve => {
  server = class ScriptedServer {
    binaryType = ""
    readyState = 0
    onopen = null
    onclose = null
    onerror = null
    onmessage = null
    constructor(url) {
      this.url = url
      queueMicrotask(() => { this.readyState = 1; this.onopen?.({}) })
    }
    send(data) {
      const m = cbor.decode(new Uint8Array(data))
      if (m.type === "join") {
        assert.equal(m.peerMetadata.tandemPresenceBatch, true)
        const b = cbor.encode({ type: "peer", senderId: "server", targetId: m.senderId, peerMetadata: {},
          selectedProtocolVersion: "1" })
        queueMicrotask(() => this.onmessage?.({ data: b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) }))
      }
      if (m.type === "sync" || m.type === "request") resolve(m)
    }
    close() { this.readyState = 3 }
  }
})

const client = tandem.connect({ url: "ws://127.0.0.1:9/ws", token: "t0ken", WebSocket: server })
assert.ok(client instanceof tandem.TandemClient)
const opened = new Promise(resolve => client.onState(c => c.state === "open" && resolve()))
const handle = client.create({ text: "hello" })
await tandem.spliceText(handle, ["text"], 5, 0, " world")
assert.equal(handle.doc().text, "hello world")

const presence = client.presence(handle, { user: { id: "ana", name: "Ana", color: "#e5484d" } })
presence.setSelection(6, 11)
assert.equal(typeof presence.local.cursor, "string")
const at = presence.positionOf({ ...presence.local, peerId: "elsewhere", lastSeenAt: 0 })
assert.deepEqual(at, { anchor: 6, head: 11 })

await opened
const m = await gotSync
assert.equal(m.documentId, handle.documentId)
assert.equal(client.state, "open")
client.close()
console.log("ok")
`

// useTypes is the TypeScript user. Like most projects it skips checking
// libraries' declarations (automerge's need Node's types and esnext's lib);
// the ts-expect-error lines fail the check if the client's declarations,
// or the peer types they name, resolve to any.
const useTypes = `
import { connect, httpOrigin, TandemClient, type PeerView, type StateChange, type UserView } from "@tandemhq/client"

const client: TandemClient = connect({ url: "ws://localhost:8080/ws", token: () => "t" })
const handle = client.create<{ text: string }>({ text: "" })
const text: string = handle.doc().text
const presence = client.presence(handle, { user: { id: "ana", name: "Ana", color: "#e5484d" } })
presence.on("join", (peer: PeerView) => peer.user.name.length)
const users: UserView[] = presence.users()
client.onState((c: StateChange) => c.retryInMs ?? 0)
const origin: string = httpOrigin("wss://tandem.example/ws")
// @ts-expect-error: url is required
connect({})
// @ts-expect-error: a user has a color
client.presence(handle, { user: { id: "bo", name: "Bo" } })
// @ts-expect-error: the document type comes through the peer's DocHandle
handle.doc().title
// @ts-expect-error: not a state
const wrong: StateChange = { state: "half-open" }
export { text, users, origin, wrong }
`

const consumerTsconfig = {
  compilerOptions: {
    target: "es2022",
    module: "nodenext",
    moduleResolution: "nodenext",
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    lib: ["es2022", "dom", "dom.iterable"],
    types: [],
  },
  files: ["use.ts"],
}
