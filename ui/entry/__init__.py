"""The folder of the script ``servescope ui`` hands to Streamlit (see streamlit_app.py)."""
