import type { DocHandle } from "@automerge/automerge-repo/slim"
import { getCursor, getCursorPosition, splice, type Cursor, type Doc, type Prop } from "@automerge/automerge/slim"

/**
 * The most characters {@link spliceText} puts in one change, inserted and
 * deleted together. A Tandem server refuses a change that costs more than
 * `--max-change-bytes` (default 64 MiB), counting 16 bytes per operation
 * (one per character inserted or deleted) besides what the change
 * expands to: a million characters cost about 20 MiB, clear of it with
 * room to spare.
 */
export const MAX_CHANGE_CHARS = 1_000_000

/** Options of {@link spliceText}. */
export interface SpliceOptions {
  /** The most characters inserted and deleted in one change; default {@link MAX_CHANGE_CHARS}. */
  maxChars?: number
  /**
   * Resolves once the server has the document at `heads` (the heads right
   * after one part went in, as `handle.heads()` gives them), so that the next part goes out in a sync
   * message of its own. By default: when the handle's remote heads (the
   * server's, which names a storage id) include the part's change, or
   * equal the document's heads.
   */
  acknowledged?: (handle: DocHandle<unknown>, heads: string[]) => Promise<void>
  /**
   * Ends the wait for the server: abort it when the server refuses the
   * document (a `TandemClient`'s `onServerError` names it), and the promise
   * rejects with the signal's reason, the parts not yet made left out.
   */
  signal?: AbortSignal
}

/**
 * Replaces `deleteCount` characters of the text at `path` from `index` with
 * `text`, like Automerge's `splice`, in as many changes as it takes to keep
 * each under `maxChars` characters inserted and deleted. Each part after
 * the first is made once the server has the one before, so that each
 * goes to the server in a sync message of its own; a part goes in after
 * the previous one even if others edit the text meanwhile (it follows an
 * Automerge cursor). An edit that fits in one change is made at once.
 * Resolves when the last part is made.
 *
 * Use it for a paste or a drop: one change of a 200 KB paste is over a
 * Tandem server's limit, refused, and the document stops syncing for this
 * client until it reconnects (and its later edits to it with it).
 */
export async function spliceText<T>(
  handle: DocHandle<T>,
  path: Prop[],
  index: number,
  deleteCount: number,
  text: string,
  options: SpliceOptions = {},
): Promise<void> {
  const max = Math.max(1, options.maxChars ?? MAX_CHANGE_CHARS)
  const acknowledged = options.acknowledged ?? serverHas
  let toDelete = deleteCount
  let rest = text
  let after: Cursor | undefined // the character the next part goes after; undefined: at index
  let first = true
  while (first || toDelete > 0 || rest.length > 0) {
    if (!first) await abortable(acknowledged(handle as DocHandle<unknown>, handle.heads()), options.signal)
    first = false
    const del = Math.min(toDelete, max)
    const part = cut(rest, max - del)
    toDelete -= del
    rest = rest.slice(part.length)
    let end = 0
    handle.change(doc => {
      const d = doc as Doc<unknown>
      const at = after === undefined ? index : getCursorPosition(d, path, after) + 1
      splice(d, path.slice(), at, del, part)
      end = at + part.length
    })
    after = end > 0 ? getCursor(handle.doc()!, path, end - 1) : undefined
    if (end === 0) index = 0
  }
}

// abortable settles as p does, or rejects once signal is aborted.
function abortable<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p
  if (signal.aborted) return Promise.reject(signal.reason)
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason)
    signal.addEventListener("abort", abort, { once: true })
    p.then(
      v => (signal.removeEventListener("abort", abort), resolve(v)),
      e => (signal.removeEventListener("abort", abort), reject(e)),
    )
  })
}

// cut returns text's first n UTF-16 units at most, never half a
// surrogate pair.
function cut(text: string, n: number): string {
  if (text.length <= n) return text
  const c = text.charCodeAt(n - 1)
  return text.slice(0, c >= 0xd800 && c <= 0xdbff ? n - 1 : n)
}

// serverHas resolves once a remote peer with a storage id (the server)
// reports heads that include heads, or equal the document's.
function serverHas(handle: DocHandle<unknown>, heads: string[]): Promise<void> {
  return new Promise(resolve => {
    const check = ({ heads: theirs }: { heads: string[] }) => {
      const ours: string[] = handle.heads()
      const same = theirs.length === ours.length && theirs.every(h => ours.includes(h))
      if (same || heads.every(h => theirs.includes(h))) {
        handle.off("remote-heads", check)
        resolve()
      }
    }
    handle.on("remote-heads", check)
  })
}
