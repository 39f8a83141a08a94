// Package auth verifies the signed tokens (JWT) that admit clients to
// Tandem and says what each token allows. A token names a user (sub, with
// an optional name and color) and the documents it may read or write.
//
// Verifier is safe for concurrent use.
package auth
