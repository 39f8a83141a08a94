package lastseen

import "github.com/tandemhq/tandem/awareness"

// Store is what both stores give presence: single and batched writes.
type Store interface {
	awareness.LastSeenStore
	awareness.LastSeenBatcher
}
