// Webhook endpoints for the end-to-end tests: a receiver that verifies
// every delivery with svix (a Standard Webhooks implementation we did not
// write), and the tokens the tests' clients connect with.
import { createHash, createHmac } from "node:crypto"
import { createServer } from "node:http"
import { Webhook } from "svix"
import { defer, psql } from "./server.mjs"

export const authSecret = "an-e2e-secret-that-is-32-bytes!!"

// token is a JWT the nodes started with --auth-secret authSecret accept.
export function token(claims) {
  claims = { exp: Math.floor(Date.now() / 1000) + 3600, docs: { "*": "write" }, ...claims }
  const b64 = v => Buffer.from(JSON.stringify(v)).toString("base64url")
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`
  return `${body}.${createHmac("sha256", authSecret).update(body).digest("base64url")}`
}

// receiver is an endpoint that verifies each delivery with svix. While
// down it answers 503 and notes the attempt's type; up, it keeps each
// event by its webhook-id, and every delivery, repeats included, in
// received. delay makes it answer that many milliseconds late (a slow
// endpoint). close() stops listening and drops every connection (a
// closed port: the endpoint is down); open() listens on the same port
// again.
export async function receiver(t, secret) {
  const wh = new Webhook(secret)
  const r = { down: false, delay: 0, attempts: [], events: new Map(), received: [], bad: 0, deliveries: 0 }
  const srv = createServer((req, res) => {
    let body = ""
    req.setEncoding("utf8")
    req.on("data", c => { body += c })
    req.on("end", () => {
      const answer = () => {
        try {
          wh.verify(body, req.headers)
        } catch {
          r.bad++
          res.writeHead(400).end()
          return
        }
        const e = JSON.parse(body)
        if (r.down) {
          r.attempts.push(e.type)
          res.writeHead(503).end()
          return
        }
        const id = req.headers["webhook-id"]
        r.deliveries++
        r.received.push({ id, event: e, at: Date.now() })
        r.events.set(id, e)
        res.writeHead(204).end()
      }
      if (r.delay > 0) {
        const timer = setTimeout(answer, r.delay)
        res.on("close", () => clearTimeout(timer)) // the sender gave up
      } else answer()
    })
  })
  let port = 0
  r.open = async () => {
    await new Promise((ok, fail) => {
      srv.once("error", fail)
      srv.listen(port, "127.0.0.1", () => { srv.off("error", fail); ok() })
    })
    port = srv.address().port
  }
  r.close = async () => {
    const closed = new Promise(ok => srv.close(ok))
    srv.closeAllConnections()
    await closed
  }
  await r.open()
  defer(t, () => srv.listening && r.close())
  r.url = `http://127.0.0.1:${port}/hooks`
  r.ofType = type => [...r.events.values()].filter(e => e.type === type)
  // The deliveries to this endpoint not yet done, in a cluster's
  // PostgreSQL: its River queue is named by its URL's hash.
  r.waiting = () => psql(`SELECT COUNT(*) FROM river_job WHERE queue = 'tandem_webhook_${
    createHash("sha256").update(r.url).digest("hex").slice(0, 12)}' AND state <> 'completed'`)
  return r
}
