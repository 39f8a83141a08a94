// Helpers that run the real tandem binary for the end-to-end tests.
import { spawn, execFileSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { once } from "node:events"
import { createInterface } from "node:readline"

const root = resolve(fileURLToPath(import.meta.url), "../../../..")
let built

// binary returns the path of the tandem binary: $TANDEM_BIN if set,
// otherwise one built once for this test process.
export function binary() {
  if (process.env.TANDEM_BIN) return process.env.TANDEM_BIN
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "tandem-bin-"))
    built = join(dir, "tandem")
    execFileSync("go", ["build", "-o", built, "./cmd/tandem"], { cwd: root, stdio: "inherit" })
  }
  return built
}

// defer registers fn to run when test t ends, last registered first, so
// that clients close before the server they talk to is stopped (a stock
// client whose server vanishes schedules reconnects that outlive it).
const stacks = new WeakMap()
export function defer(t, fn) {
  let stack = stacks.get(t)
  if (!stack) {
    stack = []
    stacks.set(t, stack)
    t.after(async () => {
      while (stack.length) await stack.pop()()
    })
  }
  stack.push(fn)
}

export function tempDir(t) {
  const dir = mkdtempSync(join(tmpdir(), "tandem-e2e-"))
  defer(t, () => rmSync(dir, { recursive: true, force: true }))
  return dir
}

// start runs tandem on a free port and resolves once it serves.
// The returned object has url (ws://…/ws), http (http://…), logs and stop().
export async function start(t, { dataDir, args = [], port = 0 } = {}) {
  dataDir ??= tempDir(t)
  const proc = spawn(binary(), ["--addr", `127.0.0.1:${port}`, "--data-dir", dataDir, "--log-level", "debug", ...args], {
    stdio: ["ignore", "inherit", "pipe"],
  })
  const logs = []
  const lines = createInterface({ input: proc.stderr })
  const exited = once(proc, "exit")
  const addr = await new Promise((resolveAddr, reject) => {
    const timer = setTimeout(() => reject(new Error("tandem did not start in 20s:\n" + logs.join("\n"))), 20000)
    proc.on("exit", code => { clearTimeout(timer); reject(new Error(`tandem exited (${code}):\n${logs.join("\n")}`)) })
    lines.on("line", line => {
      logs.push(line)
      try {
        const rec = JSON.parse(line)
        if (rec.msg === "tandem serving") { clearTimeout(timer); resolveAddr(rec.addr) }
      } catch { /* not JSON: keep it in logs */ }
    })
  })
  const node = {
    proc, dataDir, logs, args,
    port: Number(addr.split(":").at(-1)),
    url: `ws://${addr}/ws`,
    http: `http://${addr}`,
    async kill(signal = "SIGKILL") {
      if (proc.exitCode !== null || proc.signalCode !== null) return
      proc.kill(signal)
      await exited
    },
  }
  defer(t, () => node.kill())
  return node
}

// until polls cond every 10 ms until it returns a truthy value or the
// timeout passes.
export async function until(what, cond, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await cond()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(r => setTimeout(r, 10))
  }
}

// freePort asks the kernel for a free TCP port.
export async function freePort() {
  const { createServer } = await import("node:net")
  const srv = createServer()
  await new Promise(r => srv.listen(0, "127.0.0.1", r))
  const { port } = srv.address()
  await new Promise(r => srv.close(r))
  return port
}

// startRedis runs a private redis-server on a free port (stop and restart
// it to simulate an outage). It keeps nothing on disk.
export async function startRedis(t, port) {
  port ??= await freePort()
  const proc = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
    stdio: ["ignore", "pipe", "inherit"],
  })
  const exited = once(proc, "exit")
  await new Promise((resolveReady, reject) => {
    const lines = createInterface({ input: proc.stdout })
    lines.on("line", l => { if (l.includes("Ready to accept connections")) resolveReady() })
    proc.on("exit", code => reject(new Error(`redis-server exited (${code})`)))
  })
  const redis = {
    port, url: `redis://127.0.0.1:${port}/0`,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return
      proc.kill("SIGKILL")
      await exited
    },
  }
  defer(t, () => redis.stop())
  return redis
}

// startRedisCluster runs a private Redis Cluster: three masters, a replica
// each, on free ports, nothing on disk but its configuration, and resolves
// once every node says it is ok. url is for --redis-cluster --redis-url;
// killMasterOf(key) SIGKILLs the master serving a key or sharded channel
// and resolves once a replica serves its slot and the cluster is ok.
export async function startRedisCluster(t) {
  const dir = tempDir(t)
  const nodes = []
  for (let i = 0; i < 6; i++) {
    const port = await freePort()
    const proc = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
      "--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`, "--cluster-node-timeout", "2000",
      "--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0", "--dir", dir], { stdio: ["ignore", "pipe", "inherit"] })
    const exited = once(proc, "exit")
    await new Promise((resolveReady, reject) => {
      createInterface({ input: proc.stdout }).on("line", l => { if (l.includes("Ready to accept connections")) resolveReady() })
      proc.on("exit", code => reject(new Error(`redis-server exited (${code})`)))
    })
    const node = {
      port, addr: `127.0.0.1:${port}`,
      async kill() {
        if (proc.exitCode !== null || proc.signalCode !== null) return
        proc.kill("SIGKILL")
        await exited
      },
      alive: () => proc.exitCode === null && proc.signalCode === null,
    }
    defer(t, () => node.kill())
    nodes.push(node)
  }
  const cli = (node, ...args) => execFileSync("redis-cli", ["-p", String(node.port), ...args], { encoding: "utf8" }).trim()
  execFileSync("redis-cli", ["--cluster", "create", ...nodes.map(n => n.addr), "--cluster-replicas", "1", "--cluster-yes"], { stdio: "ignore" })
  const healthy = () => nodes.filter(n => n.alive()).every(n => {
    try {
      const info = cli(n, "CLUSTER", "INFO")
      const replicas = cli(n, "CLUSTER", "NODES").split("\n").filter(l => l.split(" ")[2]?.includes("slave") && l.split(" ")[3] !== "-").length
      return info.includes("cluster_state:ok") && replicas >= nodes.filter(x => x.alive()).length - 3
    } catch { return false }
  })
  await until("the Redis Cluster to be ok", healthy, 30000)
  // masterOf is the address of the master serving key, as a live node says.
  const masterOf = key => {
    const live = nodes.find(n => n.alive())
    const slot = Number(cli(live, "CLUSTER", "KEYSLOT", key))
    for (const line of cli(live, "CLUSTER", "NODES").split("\n")) {
      const f = line.split(" ")
      if (!f[2]?.includes("master") || f[2].includes("fail")) continue
      for (const r of f.slice(8)) {
        const [lo, hi = lo] = r.split("-").map(Number)
        if (slot >= lo && slot <= hi) return f[1].split("@")[0]
      }
    }
    return ""
  }
  return {
    nodes,
    url: `redis://${nodes[0].addr}?` + nodes.slice(1).map(n => `addr=${n.addr}`).join("&"),
    masterOf,
    async killMasterOf(key) {
      const old = masterOf(key)
      await nodes.find(n => n.addr === old).kill()
      await until("a replica to serve the killed master's slots", () => {
        const now = masterOf(key)
        return now !== "" && now !== old && healthy()
      }, 30000)
    },
  }
}

const postgresBase = process.env.TANDEM_TEST_POSTGRES ?? "postgres://postgres@127.0.0.1:5432/test"
// Each test process keeps its tables in a schema of its own, dropped when
// it exits: nodes of tests running at the same time (another suite, a
// benchmark, a second checkout) never share tables or a notification
// queue, whose workers would otherwise take each other's jobs.
const schema = `tandem_e2e_${process.pid}_${Date.now().toString(36)}`

// psql runs one statement in this process's schema and returns its output.
export function psql(sql) {
  return execFileSync("psql", [postgresBase, "-v", "ON_ERROR_STOP=1", "-tAc", sql], {
    encoding: "utf8",
    env: { ...process.env, PGOPTIONS: `-c search_path=${schema}` },
  }).trim()
}

psql(`CREATE SCHEMA ${schema}`)
process.on("exit", () => {
  try {
    psql(`DROP SCHEMA ${schema} CASCADE`)
  } catch (err) {
    console.error(`dropping schema ${schema}: ${err.message}`)
  }
})

/** The nodes' --postgres-url: the test PostgreSQL, in this process's schema. */
export const postgresURL = (() => {
  const u = new URL(postgresBase)
  u.searchParams.set("search_path", schema)
  return u.toString()
})()
