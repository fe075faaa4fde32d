import streamlit as st

st.title("DAMCHA Lab")
st.write("Data-adaptive Mahalanobis cross-head attention: train, inspect and export.")
