package sqlargs

import "testing"

func TestPlaceholdersAreNumberedInOrder(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT 1":                                     "SELECT 1",
		"DELETE FROM t WHERE a = ? AND b = ?":          "DELETE FROM t WHERE a = $1 AND b = $2",
		"INSERT INTO t VALUES (?,?,?,?,?,?,?,?,?,?,?)": "INSERT INTO t VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)",
		"SELECT 'é' WHERE x = ?":                       "SELECT 'é' WHERE x = $1",
	} {
		if got := Numbered(in); got != want {
			t.Errorf("Numbered(%q) = %q, want %q", in, got, want)
		}
	}
}
