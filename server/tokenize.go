package server

import (
	"net/http"

	"github.com/modrun/modrun"
)

// tokenize answers POST /tokenize {"content": TEXT, "add_special": BOOL}
// with {"tokens": [ids]} (llama-server's shape). The text is plain: control
// tokens written in it stay text.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request, m *modrun.Model) (served, error) {
	var req struct {
		Content    *string `json:"content"`
		AddSpecial bool    `json:"add_special"`
	}
	if err := decode(r.Body, &req); err != nil {
		return served{}, err
	}
	if req.Content == nil {
		return served{}, badRequest("content", "invalid_value", "content is missing: the text to tokenize")
	}
	ids, err := m.Tokenize(*req.Content, req.AddSpecial)
	if err != nil {
		return served{}, badRequest("content", "invalid_value", "%v", err)
	}
	if ids == nil {
		ids = []int32{}
	}
	writeJSON(w, http.StatusOK, map[string][]int32{"tokens": ids})
	return served{}, nil
}

// detokenize answers POST /detokenize {"tokens": [ids]} with
// {"content": TEXT}.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request, m *modrun.Model) (served, error) {
	var req struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := decode(r.Body, &req); err != nil {
		return served{}, err
	}
	for i, id := range req.Tokens {
		if id < 0 || int(id) >= s.info.NVocab {
			return served{}, badRequest("tokens", "invalid_value", "tokens[%d]: %d is outside the vocabulary [0, %d)", i, id, s.info.NVocab)
		}
	}
	text, err := m.Detokenize(req.Tokens)
	if err != nil {
		return served{}, badRequest("tokens", "invalid_value", "%v", err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": text})
	return served{}, nil
}
