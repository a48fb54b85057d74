package site

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	gosync "sync"
	"time"

	"github.com/convergehq/converge"
)

const (
	// uiCookie is the site's session cookie (HttpOnly, SameSite=Strict).
	uiCookie = "converge_ui"
	// uiSessionTTL is how long a sign-in lasts.
	uiSessionTTL = 12 * time.Hour
	// uiMaxSessions bounds the sessions held; the oldest goes first.
	uiMaxSessions = 1000
	// uiActionTimeout bounds one action (a verb waits for its worker).
	uiActionTimeout = 2 * time.Minute
)

// MinActionToken is the shortest login token NewActions may be given.
const MinActionToken = 16

// Actor carries out the actions a signed-in person asks for on a
// resource's page: stateapi.Controller, the admin API's controller (the
// running scheduler's Delete and Do), implements it.
type Actor interface {
	Delete(ctx context.Context, id converge.ID) error
	Do(ctx context.Context, id converge.ID, verb string, args map[string]string) (*converge.Result, error)
}

// Actions serves the site's write side (serve --ui-actions): a person
// signs in with the login token (a bearer token, once) and gets a session
// cookie and a CSRF token; each action then needs both, and the
// resource's id typed again as its confirmation. An action is the admin
// API's: ctl returns the Actor the admin socket serves, never a second
// code path, or nil while this process runs no engine (a follower
// replica).
type Actions struct {
	token []byte
	ctl   func() Actor
	log   *slog.Logger
	now   func() time.Time

	mu       gosync.Mutex
	sessions map[string]uiSession // by session id
}

type uiSession struct {
	csrf    string
	expires time.Time
}

// NewActions returns the write side for the login token (at least
// MinActionToken bytes; the caller checks it), acting through ctl and
// logging sign-ins and actions on log.
func NewActions(token string, ctl func() Actor, log *slog.Logger) *Actions {
	return &Actions{token: []byte(token), ctl: ctl, log: log, now: time.Now, sessions: map[string]uiSession{}}
}

// Register adds the action endpoints to mux. Without them (serve without
// --ui-actions) GET /ui/session is the site's 404, which the page's
// script reads as "read-only".
func (a *Actions) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui/session", a.session)
	mux.HandleFunc("POST /ui/session", a.signIn)
	mux.HandleFunc("DELETE /ui/session", a.signOut)
	mux.HandleFunc("POST /ui/delete", a.delete)
	mux.HandleFunc("POST /ui/do", a.do)
}

type uiSessionReply struct {
	Actions  bool   `json:"actions"`
	SignedIn bool   `json:"signedIn"`
	CSRF     string `json:"csrf,omitempty"`
}

type uiRequest struct {
	ID      converge.ID       `json:"id"`
	Verb    string            `json:"verb,omitempty"`
	Args    map[string]string `json:"args,omitempty"`
	Confirm string            `json:"confirm"`
}

// uiReply answers an action. A verb's answer is its outcome and message
// only, never its outputs (a status may hold secrets the site redacts).
type uiReply struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Message string `json:"message,omitempty"`
}

func uiJSON(w http.ResponseWriter, code int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // a failed write is a client that went away
}

func uiError(w http.ResponseWriter, code int, msg string) {
	uiJSON(w, code, uiReply{Error: msg})
}

// current returns the request's live session, if any.
func (a *Actions) current(r *http.Request) (string, uiSession, bool) {
	c, err := r.Cookie(uiCookie)
	if err != nil {
		return "", uiSession{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[c.Value]
	if !ok || !a.now().Before(s.expires) {
		delete(a.sessions, c.Value)
		return "", uiSession{}, false
	}
	return c.Value, s, true
}

// session tells the page that actions are on and whether it is signed in
// (with its CSRF token then).
func (a *Actions) session(w http.ResponseWriter, r *http.Request) {
	_, s, ok := a.current(r)
	uiJSON(w, http.StatusOK, uiSessionReply{Actions: true, SignedIn: ok, CSRF: s.csrf})
}

// sameOrigin refuses a write that is not a JSON request from the site's
// own pages: a cross-site form cannot send application/json, and a
// browser names the origin of a cross-site fetch.
func sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" && r.Method != http.MethodDelete {
		uiError(w, http.StatusUnsupportedMediaType, "actions take application/json")
		return false
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		uiError(w, http.StatusForbidden, "cross-site request refused")
		return false
	}
	// The origin's host must be the one the request was sent to; its
	// scheme may differ behind a reverse proxy that terminates TLS.
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			uiError(w, http.StatusForbidden, "cross-origin request refused: "+o)
			return false
		}
	}
	return true
}

// signIn checks the bearer token and starts a session.
func (a *Actions) signIn(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(w, r) {
		return
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), a.token) != 1 {
		a.log.Warn("ui: sign-in refused", "remote", r.RemoteAddr)
		uiError(w, http.StatusUnauthorized, "wrong login token")
		return
	}
	id, csrf := randomHex(), randomHex()
	now := a.now()
	a.mu.Lock()
	for k, s := range a.sessions {
		if !now.Before(s.expires) {
			delete(a.sessions, k)
		}
	}
	for len(a.sessions) >= uiMaxSessions { // drop the one nearest expiry
		var oldest string
		for k, s := range a.sessions {
			if oldest == "" || s.expires.Before(a.sessions[oldest].expires) {
				oldest = k
			}
		}
		delete(a.sessions, oldest)
	}
	a.sessions[id] = uiSession{csrf: csrf, expires: now.Add(uiSessionTTL)}
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(uiSessionTTL / time.Second)})
	a.log.Info("ui: signed in", "remote", r.RemoteAddr)
	uiJSON(w, http.StatusOK, uiSessionReply{Actions: true, SignedIn: true, CSRF: csrf})
}

// authorized checks a write's origin, session and CSRF token.
func (a *Actions) authorized(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !sameOrigin(w, r) {
		return "", false
	}
	id, s, ok := a.current(r)
	if !ok {
		uiError(w, http.StatusUnauthorized, "sign in first")
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-CSRF-Token")), []byte(s.csrf)) != 1 {
		uiError(w, http.StatusForbidden, "missing or wrong CSRF token")
		return "", false
	}
	return id, true
}

func (a *Actions) signOut(w http.ResponseWriter, r *http.Request) {
	id, ok := a.authorized(w, r)
	if !ok {
		return
	}
	a.mu.Lock()
	delete(a.sessions, id)
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: "", Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	uiJSON(w, http.StatusOK, uiSessionReply{Actions: true})
}

// action reads an authorized, confirmed request and the controller to
// carry it out.
func (a *Actions) action(w http.ResponseWriter, r *http.Request) (*uiRequest, Actor, bool) {
	if _, ok := a.authorized(w, r); !ok {
		return nil, nil, false
	}
	var req uiRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		uiError(w, http.StatusBadRequest, "bad request: "+err.Error())
		return nil, nil, false
	}
	if req.ID == "" {
		uiError(w, http.StatusBadRequest, "id: missing")
		return nil, nil, false
	}
	if req.Confirm != string(req.ID) {
		uiError(w, http.StatusBadRequest, "confirm: type the resource's id ("+string(req.ID)+") to confirm")
		return nil, nil, false
	}
	ctl := a.ctl()
	if ctl == nil {
		uiError(w, http.StatusServiceUnavailable, "this serve runs no engine now (a follower replica): act on the leader's site")
		return nil, nil, false
	}
	return &req, ctl, true
}

func actionStatus(err error) int {
	if errors.Is(err, converge.ErrNotFound) {
		return http.StatusNotFound
	}
	return http.StatusConflict
}

// delete deletes a resource and its dependents, as `converge delete`.
func (a *Actions) delete(w http.ResponseWriter, r *http.Request) {
	req, ctl, ok := a.action(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
	defer cancel()
	err := ctl.Delete(ctx, req.ID)
	a.log.Info("ui: delete", "id", req.ID, "remote", r.RemoteAddr, "err", err)
	if err != nil {
		uiError(w, actionStatus(err), err.Error())
		return
	}
	uiJSON(w, http.StatusOK, uiReply{OK: true})
}

// do runs an operator verb, as `converge do`.
func (a *Actions) do(w http.ResponseWriter, r *http.Request) {
	req, ctl, ok := a.action(w, r)
	if !ok {
		return
	}
	if req.Verb == "" {
		uiError(w, http.StatusBadRequest, "verb: missing")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
	defer cancel()
	res, err := ctl.Do(ctx, req.ID, req.Verb, req.Args)
	a.log.Info("ui: do", "id", req.ID, "verb", req.Verb, "remote", r.RemoteAddr, "err", err)
	if err != nil {
		uiError(w, actionStatus(err), err.Error())
		return
	}
	reply := uiReply{OK: true}
	if res != nil {
		reply.Outcome, reply.Message = res.Outcome.String(), res.Message
	}
	uiJSON(w, http.StatusOK, reply)
}

func randomHex() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b)
}
