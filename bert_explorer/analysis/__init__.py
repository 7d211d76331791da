"""Analyses of a BERT: features, attention statistics, embeddings, probes (no Streamlit here)."""
