package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// apiError is an error as OpenAI's API writes it:
// {"error":{"message","type","param","code"}}, with its HTTP status.
type apiError struct {
	Status  int
	Type    string // "invalid_request_error", "server_error", ...
	Param   string // the request field at fault ("" = none)
	Code    string
	Message string

	retryAfter time.Duration // a 503's Retry-After
}

func (e *apiError) Error() string { return e.Message }

// badRequest is a 400 that names the field at fault.
func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code,
		Message: fmt.Sprintf(format, args...)}
}

// writeError writes err as OpenAI's error object: an apiError as it says,
// a too-large body as 413, a cancelled request as 499 (nobody reads it),
// anything else as 500.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &tooLarge):
		ae = &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
			Message: fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit)}
	case errors.Is(err, errClientGone):
		ae = &apiError{Status: 499, Type: "server_error", Code: "cancelled", Message: "the client went away"}
	default:
		ae = &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()}
	}
	if ae.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((ae.retryAfter+time.Second-1)/time.Second)))
	}
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b := body{Message: ae.Message, Type: ae.Type}
	if ae.Param != "" {
		b.Param = &ae.Param
	}
	if ae.Code != "" {
		b.Code = &ae.Code
	}
	writeJSON(w, ae.Status, map[string]body{"error": b})
}

var errClientGone = errors.New("server: the client went away")

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a client gone mid-write is not our error
}

// decode reads r's JSON body into v. Malformed JSON, a field of the wrong
// type, or a body too large is an error naming what is wrong (and the
// field).
func decode(body io.Reader, v any) error {
	b, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return badRequest("", "invalid_body", "reading the request body: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		var typ *json.UnmarshalTypeError
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &typ) && typ.Field != "":
			field := strings.TrimPrefix(typ.Field, "sampling.") // the embedded struct's fields are the request's
			return badRequest(field, "invalid_type", "%s: a JSON %s is not a %s", field, typ.Value, typeName(typ.Type.String()))
		case errors.As(err, &syn):
			return badRequest("", "invalid_json", "the body is not valid JSON: %v (at byte %d)", err, syn.Offset)
		case errors.As(err, &typ):
			return badRequest("", "invalid_json", "the body must be a JSON object, not a %s", typ.Value)
		default:
			var fe *fieldError
			if errors.As(err, &fe) {
				return badRequest(fe.field, "invalid_type", "%s: %s", fe.field, fe.msg)
			}
			return badRequest("", "invalid_json", "the body is not valid JSON: %v", err)
		}
	}
	return nil
}

// typeName says a Go type as JSON would.
func typeName(goType string) string {
	switch goType {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "int", "int64", "int32", "uint64", "float64", "float32", "*int", "*float64", "*int64":
		return "number"
	}
	return goType
}

// fieldError is a custom decoder's error about one field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }
