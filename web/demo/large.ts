// Edits too large for one Automerge change, made in parts.
import type { DocHandle } from "@automerge/automerge-repo/slim"
import type { Prop } from "@automerge/automerge/slim"
import { EditorState, Transaction, type Extension } from "@codemirror/state"
import { MAX_CHANGE_CHARS, spliceText, type SpliceOptions } from "@tandemhq/client"

// largeEdits keeps an edit too large for one change out of the sync plugin,
// which would make it one change (a paste of 200 KB is twice over the
// server's default limit, and a change over it is refused): a user's edit
// of more than MAX_CHANGE_CHARS characters, inserted and deleted (a
// paste, a drop, a cut, an undo of either), goes to spliceText instead,
// which makes it in parts, each its own change sent once the server has
// the one before; each part reaches the editor as it is made. Ranges are
// made last first, so that making one does not move where the ones before
// it go.
export function largeEdits(handle: DocHandle<unknown>, path: Prop[], options?: SpliceOptions): Extension {
  return EditorState.transactionFilter.of(tr => {
    if (!tr.docChanged || tr.annotation(Transaction.userEvent) === undefined) return tr // remote changes have no user event
    let size = 0
    const ranges: { from: number; to: number; text: string }[] = []
    tr.changes.iterChanges((fromA, toA, _fromB, _toB, inserted) => {
      size += toA - fromA + inserted.length
      ranges.push({ from: fromA, to: toA, text: inserted.toString() })
    })
    if (size <= (options?.maxChars ?? MAX_CHANGE_CHARS)) return tr
    void (async () => {
      for (const r of ranges.reverse()) await spliceText(handle, path, r.from, r.to - r.from, r.text, options)
    })().catch(err => console.warn("a large edit stopped:", err))
    return []
  })
}

