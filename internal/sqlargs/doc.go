// Package sqlargs writes one query for SQLite and PostgreSQL: queries are
// written with ? placeholders, as SQLite takes them, and Numbered rewrites
// them to PostgreSQL's $1, $2, … . A query must hold no ? other than its
// placeholders (none in a string literal). Pure functions, safe for
// concurrent use.
package sqlargs
