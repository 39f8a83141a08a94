package awareness

// Identity is who a peer is, as a verified token says.
type Identity struct {
	UserID string
	Name   string
	Color  string
}

// Identified is implemented by peers whose identity is verified. For them
// the server owns the user channel: whatever the peer writes there is
// replaced by its identity, so no one can appear as someone else.
type Identified interface {
	Identity() Identity
}

func identityOf(p Peer) *Identity {
	if ip, ok := p.(Identified); ok {
		if id := ip.Identity(); id.UserID != "" {
			return &id
		}
	}
	return nil
}

// value is the user channel value of an identity.
func (id *Identity) value() []byte {
	v := map[string]string{"id": id.UserID}
	if id.Name != "" {
		v["name"] = id.Name
	}
	if id.Color != "" {
		v["color"] = id.Color
	}
	b, err := encMode.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// UserOf names the user behind a peer of a document: the user its
// connection's token names (Identified), or else, on a node running open,
// the user its presence in the document names; "" if neither says. The
// document layer names the author of a mention with it.
func (h *Hub) UserOf(documentID string, p interface{ ID() string }) (userID, name string) {
	if ip, ok := p.(Identified); ok {
		if id := ip.Identity(); id.UserID != "" {
			return id.UserID, id.Name
		}
	}
	for _, pv := range h.DocumentPresence(documentID) {
		if pv.PeerID == p.ID() {
			name, _ := pv.Name.(string)
			return pv.UserID, name
		}
	}
	return "", ""
}
